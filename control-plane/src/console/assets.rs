//! The console's static files, embedded in the binary and served under names that carry
//! their content's hash (`htmx.min.3f2a9c01.js`), so browsers may keep them for a year:
//! a new build that changes a file changes its name.

use std::sync::LazyLock;

use axum::extract::Path;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

/// One embedded file.
struct Asset {
    /// The name the templates ask for (`console.css`).
    name: &'static str,
    content_type: &'static str,
    body: &'static [u8],
    /// The name it is served under, with its hash.
    hashed: String,
}

macro_rules! asset {
    ($name:literal, $content_type:literal) => {
        ($name, $content_type, {
            include_bytes!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/console/assets/",
                $name
            )) as &'static [u8]
        })
    };
}

static ASSETS: LazyLock<Vec<Asset>> = LazyLock::new(|| {
    [
        asset!("console.css", "text/css; charset=utf-8"),
        asset!("favicon.svg", "image/svg+xml"),
        asset!("console.js", "text/javascript; charset=utf-8"),
        asset!("htmx.min.js", "text/javascript; charset=utf-8"),
        asset!("htmx-ext-sse.min.js", "text/javascript; charset=utf-8"),
        asset!("redoc.standalone.js", "text/javascript; charset=utf-8"),
        asset!("docs.js", "text/javascript; charset=utf-8"),
        asset!("docs.css", "text/css; charset=utf-8"),
        asset!("LICENSES.txt", "text/plain; charset=utf-8"),
    ]
    .into_iter()
    .map(|(name, content_type, body)| Asset {
        name,
        content_type,
        body,
        hashed: hashed_name(name, body),
    })
    .collect()
});

/// `name` with the first 8 bytes of its content's SHA-256 before the extension.
fn hashed_name(name: &str, body: &[u8]) -> String {
    let digest = Sha256::digest(body);
    let hash = warden_shared::keys::hex(&digest[..8]);
    match name.rsplit_once('.') {
        Some((stem, extension)) => format!("{stem}.{hash}.{extension}"),
        None => format!("{name}.{hash}"),
    }
}

/// The URL of the embedded file `name`; an unknown name is a programming error that the
/// console's tests catch (every page is rendered there), so it yields a URL that 404s.
pub fn url(name: &str) -> String {
    let hashed = ASSETS
        .iter()
        .find(|asset| asset.name == name)
        .map_or(name, |asset| asset.hashed.as_str());
    format!("/console/assets/{hashed}")
}

/// `GET /console/assets/{file}`: a file by its hashed name, cached immutably.
pub async fn serve(Path(file): Path<String>) -> Response {
    match ASSETS.iter().find(|asset| asset.hashed == file) {
        Some(asset) => (
            [
                (CONTENT_TYPE, asset.content_type),
                (CACHE_CONTROL, "public, max-age=31536000, immutable"),
            ],
            asset.body,
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "no such file").into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_asset_is_served_under_its_hashed_name() {
        for asset in ASSETS.iter() {
            assert_eq!(url(asset.name), format!("/console/assets/{}", asset.hashed));
            assert_ne!(asset.hashed, asset.name);
            assert!(!asset.body.is_empty(), "{}", asset.name);
        }
        assert_eq!(
            hashed_name("a.css", b"x"),
            format!("a.{}.css", "2d711642b726b044")
        );
    }
}
