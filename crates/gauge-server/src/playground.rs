//! The playground: one page at `/` that drives `POST /explain` (module `explain`).
//!
//! The HTML, JavaScript and CSS are embedded in the binary with `include_str!` (no CDN, no build
//! step), and `/playground/presets.json` serves gauge's task presets so the page never carries its
//! own copy of their values. The page and its assets are public (they hold no data); the page asks
//! for the API key and sends it with every `/explain` request, which the key layer checks.

use axum::extract::Path;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::response::{IntoResponse, Response};
use gauge_sampling::presets::Preset;
use serde_json::{Map, Value};

use crate::error::ApiError;

const INDEX_HTML: &str = include_str!("../assets/playground/index.html");
const APP_JS: &str = include_str!("../assets/playground/app.js");
const STYLE_CSS: &str = include_str!("../assets/playground/style.css");

fn with_type(body: String, mime: &'static str) -> Response {
    ([(CONTENT_TYPE, mime), (CACHE_CONTROL, "no-cache")], body).into_response()
}

/// `GET /`: the page.
pub(crate) async fn page() -> Response {
    with_type(INDEX_HTML.to_string(), "text/html; charset=utf-8")
}

/// The presets a task picks from, as request fields.
fn presets() -> Value {
    let mut m = Map::new();
    for p in [Preset::Json, Preset::Code, Preset::Chat, Preset::Creative] {
        m.insert(p.name().to_string(), p.params().to_value());
    }
    Value::Object(m)
}

/// `GET /playground/{asset}`.
pub(crate) async fn asset(Path(name): Path<String>) -> Response {
    match name.as_str() {
        "app.js" => with_type(APP_JS.to_string(), "text/javascript; charset=utf-8"),
        "style.css" => with_type(STYLE_CSS.to_string(), "text/css; charset=utf-8"),
        "presets.json" => with_type(presets().to_string(), "application/json"),
        _ => ApiError::not_found(&format!("/playground/{name}")).into_response(),
    }
}

/// Paths the API key does not guard: the page and its static assets.
pub(crate) fn is_public(path: &str) -> bool {
    path == "/" || path.starts_with("/playground/")
}
