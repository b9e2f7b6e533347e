//! The error answers of the API, described once: one response component
//! per status (`#/components/responses/NotFound`, ...), each an [`Error`]
//! body whose `error` is the kind of that status. A handler's
//! `#[utoipa::path]` names those it answers itself; [`ANY_ROUTE`] and
//! [`TOKEN_ROUTE`] are those the layers in front of every route answer,
//! which the description adds to each operation.
//!
//! [`Error`]: crate::serve::error::ErrorBody

use axum::http::StatusCode;
use utoipa::openapi::schema::{AllOfBuilder, ObjectBuilder, Type};
use utoipa::openapi::{ContentBuilder, HeaderBuilder, Ref, RefOr, Response, ResponseBuilder};

use crate::serve::error::ErrorKind;

/// The response of an error with `status`: an `Error` body whose `error`
/// can only be that status's kind, and `headers` (name, schema type,
/// description).
fn refusal(status: StatusCode, description: &str, headers: &[(&str, Type, &str)]) -> Response {
    let kind = serde_json::to_value(ErrorKind::of(status)).ok();
    let this_kind = ObjectBuilder::new()
        .property(
            "error",
            ObjectBuilder::new()
                .schema_type(Type::String)
                .enum_values(kind.map(|k| [k])),
        )
        .required("error");
    let schema = AllOfBuilder::new()
        .item(Ref::from_schema_name("Error"))
        .item(this_kind);
    let mut response = ResponseBuilder::new().description(description).content(
        "application/json",
        ContentBuilder::new().schema(Some(schema)).build(),
    );
    for (name, schema_type, about) in headers {
        let header = HeaderBuilder::new()
            .schema(ObjectBuilder::new().schema_type(schema_type.clone()))
            .description(Some(*about))
            .build();
        response = response.header(*name, header);
    }
    response.build()
}

/// Declares each refusal as a type usable in `responses(...)` of
/// `#[utoipa::path]` (`(status = 404, response = NotFound)`), and
/// [`all`], every one of them, for the components.
macro_rules! refusals {
    ($($(#[$doc:meta])* $name:ident = $status:ident, $description:literal $(, $header:expr)*;)+) => {
        $(
            $(#[$doc])*
            pub struct $name;

            impl<'r> utoipa::ToResponse<'r> for $name {
                fn response() -> (&'r str, RefOr<Response>) {
                    let headers: &[(&str, Type, &str)] = &[$($header),*];
                    (
                        stringify!($name),
                        refusal(StatusCode::$status, $description, headers).into(),
                    )
                }
            }
        )+

        /// Every refusal, by name: the components the operations refer to.
        pub fn all() -> Vec<(String, RefOr<Response>)> {
            vec![$({
                let (name, response) = <$name as utoipa::ToResponse>::response();
                (name.to_owned(), response)
            }),+]
        }
    };
}

refusals! {
    /// 400.
    BadRequest = BAD_REQUEST,
        "The request is wrong: no `Host` header; a body that is not JSON or not this \
        route's (an unknown field, a missing one, an integer beyond 64 bits); a bad \
        query value or header (`offset`, `replay`, `Last-Event-ID`, `limit`, `status`, \
        `since`, `after`, `follow`); a bad workflow (its line and field named); an \
        ambiguous run prefix; a command that is not one (recorded: `offset` says where). \
        `message` names what is wrong.";
    /// 401.
    Unauthorized = UNAUTHORIZED,
        "No token, or not one of the server's.";
    /// 403.
    Forbidden = FORBIDDEN,
        "Refused: the request comes from a web page of another origin (`Origin`) or \
        another site (`Sec-Fetch-Site`); the token lacks the scope this route needs; or \
        (`POST /workflows`) the `path` leaves `--root`, or an inline workflow would run \
        programs or reach files of the server's machine.";
    /// 404.
    NotFound = NOT_FOUND,
        "No such run (or it has no events, no transcript), workflow file or page file.";
    /// 405: for a method a path does not take, so no operation lists it.
    MethodNotAllowed = METHOD_NOT_ALLOWED,
        "The path does not take the request's method.",
        ("Allow", Type::String, "The methods the path takes.");
    /// 408.
    Timeout = REQUEST_TIMEOUT,
        "No response head within 60 s (a stream, once started, is never cut).";
    /// 409.
    Conflict = CONFLICT,
        "The run cannot do that now: a command to an ended run (recorded nowhere), a \
        command the run refuses (recorded: `offset` says where), a resume of a run another \
        process writes, a run whose workflow cannot be loaded again.";
    /// 413.
    PayloadTooLarge = PAYLOAD_TOO_LARGE,
        "A request body over 1 MiB.";
    /// 415.
    UnsupportedMediaType = UNSUPPORTED_MEDIA_TYPE,
        "A request body not sent as `Content-Type: application/json`.";
    /// 421.
    MisdirectedRequest = MISDIRECTED_REQUEST,
        "The `Host` is not a name the server answers to: `localhost`, a loopback \
        address, the address it listens on, and the `--allow-host` names.";
    /// 500.
    Internal = INTERNAL_SERVER_ERROR,
        "The server or its storage failed.";
    /// 503.
    Unavailable = SERVICE_UNAVAILABLE,
        "The server is shutting down (no run is started, resumed or forked any more), or \
        one of its caps is reached (connections, streams in all or per token).",
        ("Retry-After", Type::Integer, "Seconds to wait before trying again, past a cap.");
}

/// What any request may be answered, whatever its route, by the layers in
/// front of every route (`guard`, the body limit, the timeout, the
/// connection cap): status and refusal.
pub const ANY_ROUTE: [(&str, &str); 7] = [
    ("400", "BadRequest"),
    ("403", "Forbidden"),
    ("408", "Timeout"),
    ("413", "PayloadTooLarge"),
    ("415", "UnsupportedMediaType"),
    ("421", "MisdirectedRequest"),
    ("503", "Unavailable"),
];

/// What a route that needs a token may be answered besides (`auth`): no
/// token or a wrong one, a token without the route's scope, a route
/// wired without its check.
pub const TOKEN_ROUTE: [(&str, &str); 3] = [
    ("401", "Unauthorized"),
    ("403", "Forbidden"),
    ("500", "Internal"),
];
