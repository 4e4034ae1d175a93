//! Dataset names, by OpenLineage's naming conventions: a local path is namespace `file` and
//! the absolute path; an object store location is namespace `scheme://bucket` and the key
//! (`s3://bucket` + `prefix/table`). A task reading another task's table names it as that
//! task's output, so the two events meet on one dataset. Credentials, query strings and the
//! trailing `/` of a directory are left out.

use percent_encoding::percent_decode_str;

/// A dataset's namespace and name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatasetName {
    pub namespace: String,
    pub name: String,
}

/// The dataset at `location`: an absolute local path, or a URL (`file:///…`, `s3://…`, …).
pub fn dataset(location: &str) -> DatasetName {
    let Ok(url) = url::Url::parse(location).map_err(|_| ()).and_then(|u| {
        if location.contains("://") {
            Ok(u)
        } else {
            Err(())
        }
    }) else {
        return local(location);
    };
    let path = percent_decode_str(url.path())
        .decode_utf8_lossy()
        .into_owned();
    if url.scheme() == "file" {
        return local(&path);
    }
    let host = url.host_str().unwrap_or_default();
    let port = url.port().map(|p| format!(":{p}")).unwrap_or_default();
    DatasetName {
        namespace: format!("{}://{host}{port}", url.scheme()),
        name: path.trim_matches('/').to_string(),
    }
}

fn local(path: &str) -> DatasetName {
    let trimmed = path.trim_end_matches('/');
    DatasetName {
        namespace: "file".to_string(),
        name: if trimmed.is_empty() { "/" } else { trimmed }.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(location: &str) -> (String, String) {
        let d = dataset(location);
        (d.namespace, d.name)
    }

    #[test]
    fn locations_become_namespace_and_name() {
        let p = |a: &str, b: &str| (a.to_string(), b.to_string());
        assert_eq!(
            pair("/p/data/lineitem.parquet"),
            p("file", "/p/data/lineitem.parquet")
        );
        assert_eq!(pair("file:///p/lake/daily/"), p("file", "/p/lake/daily"));
        assert_eq!(pair("/p/lake/daily/"), p("file", "/p/lake/daily"));
        assert_eq!(pair("file:///p/my%20lake/t/"), p("file", "/p/my lake/t"));
        assert_eq!(
            pair("s3://bucket/lake/daily/"),
            p("s3://bucket", "lake/daily")
        );
        assert_eq!(
            pair("s3://key:secret@bucket/raw/*.parquet?token=x"),
            p("s3://bucket", "raw/*.parquet")
        );
        assert_eq!(pair("gs://b/x.csv"), p("gs://b", "x.csv"));
        assert_eq!(pair("/p/data/*.parquet"), p("file", "/p/data/*.parquet"));
    }
}
