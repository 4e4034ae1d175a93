//! Stores that change only single puts or ranged reads of the store they wrap (the
//! memory-mapped source store, the fault-injecting test store): each implements
//! [`Intercept`], and [`Wrapped`] makes it an `ObjectStore` that hands everything else to
//! the wrapped store unchanged.

use std::fmt;
use std::ops::Range;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};

/// What a wrapping store changes; by default nothing.
#[async_trait]
pub trait Intercept: fmt::Debug + fmt::Display + Send + Sync + 'static {
    /// The wrapped store.
    fn inner(&self) -> &dyn ObjectStore;

    /// What a put returns, once the wrapped store made it (default: its result).
    fn after_put(&self, _location: &Path, result: Result<PutResult>) -> Result<PutResult> {
        result
    }

    /// Ranged reads served here instead (`None`: by the wrapped store).
    async fn read_ranges(
        &self,
        _location: &Path,
        _ranges: &[Range<u64>],
    ) -> Option<Result<Vec<Bytes>>> {
        None
    }
}

/// An [`Intercept`] as an `ObjectStore`.
#[derive(Debug)]
pub struct Wrapped<I>(pub I);

impl<I: Intercept> fmt::Display for Wrapped<I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

#[async_trait]
impl<I: Intercept> ObjectStore for Wrapped<I> {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        let result = self.0.inner().put_opts(location, payload, opts).await;
        self.0.after_put(location, result)
    }
    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        match self.0.read_ranges(location, ranges).await {
            Some(read) => read,
            None => self.0.inner().get_ranges(location, ranges).await,
        }
    }
    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.0.inner().put_multipart_opts(location, opts).await
    }
    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.0.inner().get_opts(location, options).await
    }
    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        self.0.inner().delete_stream(locations)
    }
    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.0.inner().list(prefix)
    }
    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.0.inner().list_with_offset(prefix, offset)
    }
    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.0.inner().list_with_delimiter(prefix).await
    }
    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.0.inner().copy_opts(from, to, options).await
    }
}
