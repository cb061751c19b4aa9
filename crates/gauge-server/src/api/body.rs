//! Request bodies: read under `--max-body-bytes` and `--body-timeout`, then parsed as JSON.

use axum::body::Body;
use axum::http::StatusCode;
use futures_util::StreamExt;
use serde_json::Value;

use super::AppState;
use crate::error::ApiError;

/// The body as JSON, read under the server's size limit and body timeout.
pub(crate) async fn read_json(st: &AppState, body: Body) -> Result<Value, ApiError> {
    let bytes = read_body(body, st.cfg.max_body_bytes, st.cfg.body_timeout).await?;
    serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::invalid(None, format!("malformed JSON: {e}")))
}

/// The body, refused with 413 as soon as it passes `limit` bytes, and with 408 when it has not
/// all arrived within `timeout` (a half-sent body would otherwise hold the request forever).
pub(crate) async fn read_body(
    body: Body,
    limit: usize,
    timeout: std::time::Duration,
) -> Result<Vec<u8>, ApiError> {
    match tokio::time::timeout(timeout, read_body_unbounded(body, limit)).await {
        Ok(r) => r,
        Err(_) => Err(ApiError::invalid(
            None,
            format!(
                "the request body did not arrive within {} s (the server's --body-timeout)",
                timeout.as_secs_f64()
            ),
        )
        .with_status(StatusCode::REQUEST_TIMEOUT)
        .with_code("request_timeout")),
    }
}

async fn read_body_unbounded(body: Body, limit: usize) -> Result<Vec<u8>, ApiError> {
    let too_large = || {
        ApiError::invalid(
            None,
            format!(
                "the request body is larger than {limit} bytes (the server's --max-body-bytes)"
            ),
        )
        .with_status(StatusCode::PAYLOAD_TOO_LARGE)
        .with_code("request_too_large")
    };
    let mut out = Vec::new();
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk =
            chunk.map_err(|e| ApiError::invalid(None, format!("reading the request body: {e}")))?;
        if out.len() + chunk.len() > limit {
            return Err(too_large());
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}
