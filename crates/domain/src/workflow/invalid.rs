//! The words of a definition's refusals: what every part of the parser
//! says when an item is invalid.

use super::WorkflowError;

/// A `WorkflowError::Invalid` of `item`.
pub(super) fn invalid(item: impl Into<String>, message: impl Into<String>) -> WorkflowError {
    WorkflowError::Invalid {
        item: item.into(),
        message: message.into(),
    }
}

/// `a, b, c` for "known: ..." hints.
pub(super) fn list<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    names.into_iter().collect::<Vec<_>>().join(", ")
}
