//! Stores that watch or change the store they wrap (the memory-mapped source store, the
//! fault-injecting test store, the request counter): each implements [`Intercept`], and
//! [`Wrapped`] makes it an `ObjectStore` that hands everything else to the wrapped store
//! unchanged.

use std::fmt;
use std::ops::Range;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
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

    /// A read served here instead (`None`: by the wrapped store).
    async fn get(&self, _location: &Path, _options: &GetOptions) -> Option<Result<GetResult>> {
        None
    }

    /// Ranged reads served here instead (`None`: by the wrapped store).
    async fn read_ranges(
        &self,
        _location: &Path,
        _ranges: &[Range<u64>],
    ) -> Option<Result<Vec<Bytes>>> {
        None
    }

    /// A function told of each request handed to the wrapped store: its kind (`GET`, `HEAD`,
    /// `PUT`, `LIST`, `DELETE` per object, `COPY`), the object or prefix it names and the bytes
    /// it carried. With one, ranged
    /// reads go one range at a time through `get_opts` here, so that it sees each (default:
    /// none, and the wrapped store's own `get_ranges`).
    fn request_hook(&self) -> Option<fn(&'static str, &Path, u64)> {
        None
    }
}

/// An [`Intercept`] as an `ObjectStore`.
#[derive(Debug)]
pub struct Wrapped<I>(pub I);

impl<I: Intercept> Wrapped<I> {
    fn seen(&self, kind: &'static str, location: &Path, bytes: u64) {
        if let Some(hook) = self.0.request_hook() {
            hook(kind, location, bytes);
        }
    }
}

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
        self.seen("PUT", location, payload.content_length() as u64);
        let result = self.0.inner().put_opts(location, payload, opts).await;
        self.0.after_put(location, result)
    }
    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        match self.0.read_ranges(location, ranges).await {
            Some(read) => read,
            None if self.0.request_hook().is_some() => {
                object_store::coalesce_ranges(
                    ranges,
                    |r| self.get_range(location, r),
                    object_store::OBJECT_STORE_COALESCE_DEFAULT,
                )
                .await
            }
            None => self.0.inner().get_ranges(location, ranges).await,
        }
    }
    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.seen("PUT", location, 0);
        self.0.inner().put_multipart_opts(location, opts).await
    }
    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        if let Some(served) = self.0.get(location, &options).await {
            return served;
        }
        let head = options.head;
        let result = self.0.inner().get_opts(location, options).await;
        let bytes = match &result {
            Ok(r) if !head => r.range.end - r.range.start,
            _ => 0,
        };
        self.seen(if head { "HEAD" } else { "GET" }, location, bytes);
        result
    }
    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        match self.0.request_hook() {
            // Each path once, as the wrapped store takes it (S3 batches them into requests).
            Some(hook) => self.0.inner().delete_stream(
                locations
                    .inspect(move |p| {
                        if let Ok(p) = p {
                            hook("DELETE", p, 0)
                        }
                    })
                    .boxed(),
            ),
            None => self.0.inner().delete_stream(locations),
        }
    }
    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.seen("LIST", prefix.unwrap_or(&Path::default()), 0);
        self.0.inner().list(prefix)
    }
    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.seen("LIST", prefix.unwrap_or(&Path::default()), 0);
        self.0.inner().list_with_offset(prefix, offset)
    }
    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.seen("LIST", prefix.unwrap_or(&Path::default()), 0);
        self.0.inner().list_with_delimiter(prefix).await
    }
    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.seen("COPY", from, 0);
        self.0.inner().copy_opts(from, to, options).await
    }
}
