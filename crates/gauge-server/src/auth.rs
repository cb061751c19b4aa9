//! The API key: `Authorization: Bearer <key>` (or llama-server's `X-Api-Key: <key>`).
//!
//! The header is parsed strictly: the scheme `Bearer` (case-insensitive, as RFC 7235 defines
//! auth schemes), exactly one space, then the key and nothing else. `Bearer  KEY` (two spaces)
//! or a trailing space are refused rather than trimmed: a lenient parser accepts values that no
//! other server does and hides a broken client. `/health` and the playground's static page never need the key, and neither does a
//! CORS preflight (browsers send it without credentials; see [`crate::cors`]).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::api::AppState;
use crate::error::ApiError;

/// Constant-time comparison, so the key cannot be guessed byte by byte from response times.
fn same_key(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The credentials of an `Authorization` value: `Bearer` + one space + a token of visible ASCII.
pub(crate) fn bearer_token(value: &[u8]) -> Option<&[u8]> {
    const SCHEME: &[u8] = b"bearer ";
    if value.len() <= SCHEME.len() || !value[..SCHEME.len()].eq_ignore_ascii_case(SCHEME) {
        return None;
    }
    let token = &value[SCHEME.len()..];
    token.iter().all(u8::is_ascii_graphic).then_some(token)
}

pub(crate) fn key_matches(headers: &HeaderMap, key: &str) -> bool {
    let bearer = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| bearer_token(v.as_bytes()));
    let x_api = headers.get("x-api-key").map(|v| v.as_bytes());
    [bearer, x_api]
        .into_iter()
        .flatten()
        .any(|k| same_key(k, key.as_bytes()))
}

/// Routes open without the key.
fn is_public(path: &str) -> bool {
    path == "/health" || path == "/v1/health" || crate::playground::is_public(path)
}

/// A credential header sent more than once (`Authorization` or `X-Api-Key`): which value counts
/// would be the server's guess (RFC 9110 §5.3 forbids repeating a singleton field), so such a
/// request is refused whatever the values are.
pub(crate) fn repeated_credential(headers: &HeaderMap) -> Option<&'static str> {
    [
        (axum::http::header::AUTHORIZATION.as_str(), "Authorization"),
        ("x-api-key", "X-Api-Key"),
    ]
    .into_iter()
    .find(|(name, _)| headers.get_all(*name).iter().nth(1).is_some())
    .map(|(_, shown)| shown)
}

/// With `--api-key`, every route but `/health` needs the key.
pub(crate) async fn auth(State(st): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    if let Some(key) = &st.cfg.api_key {
        if !is_public(req.uri().path()) {
            if let Some(h) = repeated_credential(req.headers()) {
                return ApiError::unauthorized_because(format!(
                    "the `{h}` header is sent more than once: send the API key in one header"
                ))
                .into_response();
            }
            if !key_matches(req.headers(), key) {
                return ApiError::unauthorized().into_response();
            }
        }
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::{bearer_token, repeated_credential};
    use axum::http::{HeaderMap, HeaderValue};

    #[test]
    fn two_authorization_headers_are_refused_in_either_order() {
        for (a, b) in [("Bearer nope", "Bearer K"), ("Bearer K", "Bearer nope")] {
            let mut h = HeaderMap::new();
            h.append("authorization", HeaderValue::from_static(a));
            h.append("authorization", HeaderValue::from_static(b));
            assert_eq!(repeated_credential(&h), Some("Authorization"));
        }
        let mut h = HeaderMap::new();
        h.append("x-api-key", HeaderValue::from_static("K"));
        h.append("x-api-key", HeaderValue::from_static("K"));
        assert_eq!(repeated_credential(&h), Some("X-Api-Key"));
        let mut h = HeaderMap::new();
        h.append("authorization", HeaderValue::from_static("Bearer K"));
        h.append("x-api-key", HeaderValue::from_static("K"));
        assert_eq!(repeated_credential(&h), None);
    }

    #[test]
    fn bearer_needs_the_scheme_one_space_and_a_bare_token() {
        assert_eq!(bearer_token(b"Bearer k3y"), Some(&b"k3y"[..]));
        assert_eq!(bearer_token(b"bearer k3y"), Some(&b"k3y"[..]));
        for bad in [
            &b"Bearer  k3y"[..],
            b"Bearer k3y ",
            b"Bearer\tk3y",
            b"Bearer ",
            b"Bearer",
            b"Basic k3y",
            b"Bearerk3y",
            b"k3y",
            b"Bearer k 3y",
        ] {
            assert_eq!(
                bearer_token(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
