//! Errors in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}` with an HTTP status.
//!
//! Every failure a client can cause (malformed JSON, a sampling field out of range, a prompt
//! longer than the context, too many requests) becomes an [`ApiError`] with a 4xx status, so the
//! `openai` client raises the matching exception (`BadRequestError`, `AuthenticationError`, ...)
//! with the message and the field name instead of a dropped connection. Sampling errors keep the
//! library's wording (field, value, allowed range) and put the field in `param`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use gauge_engine::EngineError;
use gauge_sampling::SamplingError;
use serde_json::json;

/// One error response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// OpenAI's `type`: `invalid_request_error`, `authentication_error`, ...
    pub kind: &'static str,
    /// The request field at fault, if one is.
    pub param: Option<String>,
    pub code: Option<&'static str>,
}

impl ApiError {
    /// A 400 about `param`.
    pub fn invalid(param: Option<&str>, message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            param: param.map(str::to_string),
            code: Some("invalid_value"),
        }
    }

    /// A 400 for a field with a value outside `allowed` (the sampling library's wording).
    pub fn field(field: &str, value: impl std::fmt::Display, allowed: &str) -> Self {
        ApiError::invalid(
            Some(field),
            format!("invalid value for `{field}`: {value} (allowed: {allowed})"),
        )
    }

    /// A 400 for a feature gauge does not serve.
    pub fn unsupported(param: &str, message: impl Into<String>) -> Self {
        ApiError {
            code: Some("unsupported_value"),
            ..ApiError::invalid(Some(param), message)
        }
    }

    pub fn with_status(mut self, status: StatusCode) -> Self {
        self.status = status;
        self
    }

    pub fn with_code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    /// 401: missing or wrong API key.
    pub fn unauthorized() -> Self {
        ApiError {
            status: StatusCode::UNAUTHORIZED,
            message: "invalid or missing API key (send `Authorization: Bearer <key>`)".into(),
            kind: "authentication_error",
            param: None,
            code: Some("invalid_api_key"),
        }
    }

    /// 401 with a reason other than a missing or wrong key (a repeated credential header).
    pub fn unauthorized_because(message: impl Into<String>) -> Self {
        ApiError {
            message: message.into(),
            ..ApiError::unauthorized()
        }
    }

    /// 404 for an unknown route.
    pub fn not_found(path: &str) -> Self {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!("no such endpoint: {path}"),
            kind: "invalid_request_error",
            param: None,
            code: Some("not_found"),
        }
    }

    /// 405 for a known route with the wrong method.
    pub fn method_not_allowed() -> Self {
        ApiError {
            status: StatusCode::METHOD_NOT_ALLOWED,
            message: "method not allowed on this endpoint".into(),
            kind: "invalid_request_error",
            param: None,
            code: Some("method_not_allowed"),
        }
    }

    /// 429: every sequence slot and queue place is taken.
    pub fn busy(in_flight: usize, max: usize) -> Self {
        ApiError {
            status: StatusCode::TOO_MANY_REQUESTS,
            message: format!(
                "the server is busy: {in_flight} requests in flight (at most {max}: --parallel \
                 sequences plus --max-queue waiting); retry later"
            ),
            kind: "rate_limit_error",
            param: None,
            code: Some("server_busy"),
        }
    }

    /// 503: the server is shutting down and takes no new work, or cut this request.
    pub fn shutting_down() -> Self {
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: "the server is shutting down".into(),
            kind: "server_error",
            param: None,
            code: Some("shutting_down"),
        }
    }

    /// 500: the model or the engine failed (not the client's fault).
    pub fn internal(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: message.into(),
            kind: "server_error",
            param: None,
            code: None,
        }
    }

    /// The JSON body (also used as an SSE event when a stream fails midway).
    pub fn body(&self) -> serde_json::Value {
        json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        })
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.status)
    }
}

impl std::error::Error for ApiError {}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(self.body())).into_response()
    }
}

impl From<SamplingError> for ApiError {
    fn from(e: SamplingError) -> Self {
        let param = e.field();
        // Every message names the field, even where the library's wording does not.
        let msg = match param {
            Some(p) if !e.to_string().contains(p) => format!("`{p}`: {e}"),
            _ => e.to_string(),
        };
        let err = ApiError::invalid(param, msg);
        match e {
            SamplingError::NotSupported { .. } => err.with_code("unsupported_value"),
            SamplingError::ConflictingAliases { .. } => err.with_code("conflicting_fields"),
            _ => err,
        }
    }
}

impl From<EngineError> for ApiError {
    /// Text problems (empty prompt, template failures, NUL bytes) are the request's fault; the
    /// rest is the server's.
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::Sampling(s) => s.into(),
            EngineError::EmptyPrompt
            | EngineError::Text(_)
            | EngineError::NoChatTemplate
            | EngineError::ChatTemplate(_)
            | EngineError::TokenOutOfRange { .. } => ApiError::invalid(None, e.to_string()),
            other => ApiError::internal(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampling_range_error_names_the_field_in_param() {
        let e: ApiError = SamplingError::param("top_p", 1.5, "[0, 1] (1 = off)").into();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert_eq!(e.param.as_deref(), Some("top_p"));
        assert!(e.message.contains("top_p") && e.message.contains("[0, 1]"));
        let b = e.body();
        assert_eq!(b["error"]["type"], "invalid_request_error");
        assert_eq!(b["error"]["param"], "top_p");
    }

    #[test]
    fn unknown_sampler_is_blamed_on_samplers() {
        let e: ApiError = SamplingError::UnknownSampler("nope".into()).into();
        assert_eq!(e.param.as_deref(), Some("samplers"));
        assert!(e
            .message
            .starts_with("`samplers`: unknown sampler name `nope`"));
    }
}
