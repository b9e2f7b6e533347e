//! Errors of the HTTP API: always `{"error": kind, "message": why}` with
//! the status that says what happened, whichever layer refused the request.

use axum::body::Bytes;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// A refused or failed request.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
    /// The offset where a rejected command was recorded.
    offset: Option<u64>,
    /// Seconds to wait before trying again (`Retry-After`), past a cap.
    retry_after: Option<u32>,
}

impl ApiError {
    /// An error with `status` and `message`.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            offset: None,
            retry_after: None,
        }
    }

    /// 503 past a cap, with `Retry-After: seconds`.
    pub fn busy(message: impl Into<String>, seconds: u32) -> Self {
        let mut error = Self::new(StatusCode::SERVICE_UNAVAILABLE, message);
        error.retry_after = Some(seconds);
        error
    }

    /// Its status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// Why, as the client reads it.
    pub fn message(&self) -> &str {
        &self.message
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

    /// What the answer's body says: `{error, message, offset?}`.
    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            error: ErrorKind::of(self.status),
            message: self.message.clone(),
            offset: self.offset,
        }
    }

    /// The same error, saying where the refused command was recorded.
    #[must_use]
    pub fn recorded_at(mut self, offset: u64) -> Self {
        self.offset = Some(offset);
        self
    }
}

/// The `error` of an answer: a stable snake_case name clients may branch
/// on, one per status (see [`ErrorKind::of`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// 400, and any other 4xx without a kind of its own.
    BadRequest,
    /// 401.
    Unauthorized,
    /// 403.
    Forbidden,
    /// 404.
    NotFound,
    /// 405.
    MethodNotAllowed,
    /// 408.
    Timeout,
    /// 409.
    Conflict,
    /// 413.
    PayloadTooLarge,
    /// 415.
    UnsupportedMediaType,
    /// 421.
    MisdirectedRequest,
    /// 500, and any other 5xx without a kind of its own.
    Internal,
    /// 503.
    Unavailable,
}

impl ErrorKind {
    /// The kind of an answer with `status`.
    pub fn of(status: StatusCode) -> Self {
        match status {
            StatusCode::BAD_REQUEST => Self::BadRequest,
            StatusCode::UNAUTHORIZED => Self::Unauthorized,
            StatusCode::FORBIDDEN => Self::Forbidden,
            StatusCode::NOT_FOUND => Self::NotFound,
            StatusCode::METHOD_NOT_ALLOWED => Self::MethodNotAllowed,
            StatusCode::MISDIRECTED_REQUEST => Self::MisdirectedRequest,
            StatusCode::REQUEST_TIMEOUT => Self::Timeout,
            StatusCode::CONFLICT => Self::Conflict,
            StatusCode::PAYLOAD_TOO_LARGE => Self::PayloadTooLarge,
            StatusCode::UNSUPPORTED_MEDIA_TYPE => Self::UnsupportedMediaType,
            StatusCode::SERVICE_UNAVAILABLE => Self::Unavailable,
            s if s.is_client_error() => Self::BadRequest,
            _ => Self::Internal,
        }
    }
}

/// The body of every error answer, whatever refused the request.
// Its fields are declared in the order `serde_json::json!` wrote them
// before this type (sorted), so the bytes on the wire are the same.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = Error)]
pub struct ErrorBody {
    /// What kind of refusal or failure, one per status.
    pub error: ErrorKind,
    /// Why, for a person: names the field, value or limit at fault.
    pub message: String,
    /// Where a refused command was recorded in the run's log (`POST
    /// /workflows/{id}/commands` answered 400 or 409).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, minimum = 1)]
    pub offset: Option<u64>,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorKind::of(self.status),
            message: self.message,
            offset: self.offset,
        };
        let mut response = (self.status, axum::Json(body)).into_response();
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, seconds.into());
        }
        response
    }
}

/// Turns an error response that is not already JSON (a route that does not
/// exist, a method it does not take, a body over the limit, a timeout) into
/// `{error, message}`, so clients parse every error the same way. Its
/// headers but the body's own stay: a 405's `Allow` must reach the client.
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
    let (parts, _) = response.into_parts();
    let mut json = ApiError::new(status, message).into_response();
    for (name, value) in &parts.headers {
        if ![header::CONTENT_TYPE, header::CONTENT_LENGTH].contains(name) {
            json.headers_mut().append(name, value.clone());
        }
    }
    json
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use axum::body::Body;
    use axum::http::{HeaderValue, StatusCode, header};
    use axum::response::Response;

    /// A 405 made JSON keeps the `Allow` its router gave it (RFC 9110
    /// requires it), and loses the old body's type and length.
    #[tokio::test]
    async fn an_answer_made_json_keeps_its_headers() {
        let mut plain = Response::new(Body::empty());
        *plain.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
        let headers = plain.headers_mut();
        headers.insert(header::ALLOW, HeaderValue::from_static("GET,HEAD"));
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("0"));
        let json = super::as_json(plain).await;
        assert_eq!(json.status(), StatusCode::METHOD_NOT_ALLOWED);
        let headers = json.headers();
        assert_eq!(headers[header::ALLOW], "GET,HEAD");
        assert_eq!(headers[header::CONTENT_TYPE], "application/json");
        assert_eq!(headers.get_all(header::CONTENT_TYPE).iter().count(), 1);
        assert!(headers.get(header::CONTENT_LENGTH).is_none());
    }
}
