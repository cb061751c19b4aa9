//! CORS for browser clients (`--cors ORIGINS`), answered before the API key is checked.
//!
//! Off by default: without `--cors` no CORS header is sent and browsers on other origins are
//! blocked, which is the safe default for a server that may hold a key. With it, a request whose
//! `Origin` is listed (or any origin, for `*`) gets `Access-Control-Allow-Origin`, and a preflight
//! (`OPTIONS` with `Access-Control-Request-Method`) is answered with 204 and the methods and
//! headers allowed, without the key (browsers never send credentials on a preflight). A preflight
//! from an origin not listed gets 403.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::{
    ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_ALLOW_METHODS, ACCESS_CONTROL_ALLOW_ORIGIN,
    ACCESS_CONTROL_MAX_AGE, ACCESS_CONTROL_REQUEST_HEADERS, ACCESS_CONTROL_REQUEST_METHOD, ORIGIN,
    VARY,
};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::api::AppState;
use crate::error::ApiError;

/// Headers a browser may send when it does not list them in its preflight.
const DEFAULT_ALLOWED_HEADERS: &str = "authorization, content-type, x-api-key";

/// `*`, or `scheme://host[:port]` with scheme http or https and no path.
pub fn valid_origin(o: &str) -> bool {
    if o == "*" {
        return true;
    }
    let rest = o
        .strip_prefix("http://")
        .or_else(|| o.strip_prefix("https://"));
    rest.is_some_and(|r| {
        !r.is_empty()
            && r.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-.:[]".contains(&b))
    })
}

/// The value of `Access-Control-Allow-Origin` for this request's `Origin`, if it is allowed.
fn allowed_origin(origins: &[String], headers: &HeaderMap) -> Option<HeaderValue> {
    let origin = headers.get(ORIGIN)?;
    if origins.iter().any(|o| o == "*") {
        return Some(HeaderValue::from_static("*"));
    }
    let text = origin.to_str().ok()?;
    origins
        .iter()
        .any(|o| o.eq_ignore_ascii_case(text))
        .then(|| origin.clone())
}

pub(crate) async fn cors(State(st): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let origins = &st.cfg.cors_origins;
    if origins.is_empty() {
        return next.run(req).await;
    }
    let allow = allowed_origin(origins, req.headers());
    let preflight = req.method() == Method::OPTIONS
        && req.headers().contains_key(ACCESS_CONTROL_REQUEST_METHOD);
    let mut resp = if preflight {
        let Some(_) = &allow else {
            return ApiError {
                status: StatusCode::FORBIDDEN,
                message: "this origin is not allowed (the server's --cors list)".into(),
                kind: "invalid_request_error",
                param: None,
                code: Some("cors_origin_not_allowed"),
            }
            .into_response();
        };
        let mut r = StatusCode::NO_CONTENT.into_response();
        let h = r.headers_mut();
        h.insert(
            ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static("GET, POST, OPTIONS"),
        );
        let asked = req.headers().get(ACCESS_CONTROL_REQUEST_HEADERS).cloned();
        h.insert(
            ACCESS_CONTROL_ALLOW_HEADERS,
            asked.unwrap_or(HeaderValue::from_static(DEFAULT_ALLOWED_HEADERS)),
        );
        h.insert(ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static("600"));
        r
    } else {
        next.run(req).await
    };
    if let Some(v) = allow {
        let h = resp.headers_mut();
        let echoed = v != "*";
        h.insert(ACCESS_CONTROL_ALLOW_ORIGIN, v);
        if echoed {
            h.append(VARY, HeaderValue::from_static("Origin"));
        }
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::valid_origin;

    #[test]
    fn origins_are_scheme_host_and_port_only() {
        for ok in [
            "*",
            "http://localhost:3000",
            "https://example.com",
            "http://[::1]:8080",
        ] {
            assert!(valid_origin(ok), "{ok}");
        }
        for bad in [
            "",
            "localhost",
            "https://example.com/",
            "ftp://x",
            "https://",
            "http://a b",
        ] {
            assert!(!valid_origin(bad), "{bad}");
        }
    }
}
