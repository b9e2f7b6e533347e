//! Errors of the HTTP API: always `{"error": kind, "message": why}` with
//! the status that says what happened, whichever layer refused the request.

use axum::body::Bytes;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde_json::json;

/// A refused or failed request.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
    /// The offset where a rejected command was recorded.
    offset: Option<u64>,
}

impl ApiError {
    /// An error with `status` and `message`.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            offset: None,
        }
    }

    /// 400: the request is wrong (its JSON, a field, a workflow).
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    /// 404: no such run, file or route.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }

    /// 409: the run is not in a state to do that.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, message)
    }

    /// 500: the server or its storage failed.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }

    /// The same error, saying where the refused command was recorded.
    #[must_use]
    pub fn recorded_at(mut self, offset: u64) -> Self {
        self.offset = Some(offset);
        self
    }
}

/// The `error` of a status: a stable snake_case name clients may branch on.
fn kind(status: StatusCode) -> &'static str {
    match status {
        StatusCode::BAD_REQUEST => "bad_request",
        StatusCode::UNAUTHORIZED => "unauthorized",
        StatusCode::FORBIDDEN => "forbidden",
        StatusCode::NOT_FOUND => "not_found",
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::REQUEST_TIMEOUT => "timeout",
        StatusCode::CONFLICT => "conflict",
        StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        StatusCode::SERVICE_UNAVAILABLE => "unavailable",
        s if s.is_client_error() => "bad_request",
        _ => "internal",
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = json!({"error": kind(self.status), "message": self.message});
        if let Some(offset) = self.offset {
            body["offset"] = offset.into();
        }
        (self.status, axum::Json(body)).into_response()
    }
}

/// Turns an error response that is not already JSON (a route that does not
/// exist, a method it does not take, a body over the limit, a timeout) into
/// `{error, message}`, so clients parse every error the same way.
pub async fn as_json(response: Response) -> Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let message = match status {
        StatusCode::PAYLOAD_TOO_LARGE => {
            format!("the request body is over {} bytes", super::BODY_LIMIT)
        }
        StatusCode::METHOD_NOT_ALLOWED => "this route does not take that method".to_owned(),
        StatusCode::REQUEST_TIMEOUT => "the request took too long".to_owned(),
        other => other
            .canonical_reason()
            .unwrap_or("the request failed")
            .to_owned(),
    };
    ApiError::new(status, message).into_response()
}

/// A JSON body parsed as `T`; a problem names the field, line and column.
pub fn parse_body<T: DeserializeOwned>(body: &Bytes) -> Result<T, ApiError> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if matches!(path.as_str(), "." | "?" | "") {
            ApiError::bad_request(format!("the body is not valid: {inner}"))
        } else {
            ApiError::bad_request(format!("the body's `{path}` is not valid: {inner}"))
        }
    })?;
    de.end()
        .map_err(|e| ApiError::bad_request(format!("the body is not valid: {e}")))?;
    // serde_json reads such an integer as the nearest float: refused, not changed.
    let text = std::str::from_utf8(body).unwrap_or_default();
    if let Some(big) = domain::output::oversized_integer(text) {
        return Err(ApiError::bad_request(format!(
            "the body holds the integer {big}, which does not fit in 64 bits and would lose digits; send it as a string"
        )));
    }
    Ok(value)
}
