//! Canonical JSON (RFC 8785, JCS) and the hashes taken of it.
//!
//! A recorded request, a causal event's payload and the verifier's output are
//! compared by meaning, never by the bytes a serializer happened to write:
//! JCS fixes key order (by UTF-16 code units), number form (ECMAScript) and
//! string escapes, whatever serde_json's features (`preserve_order`) say.

use serde::Serialize;
use sha2::{Digest, Sha256};

/// Why a value has no canonical form.
#[derive(Debug, thiserror::Error)]
#[error("no canonical JSON form: {0}")]
pub struct CanonicalError(String);

/// The RFC 8785 bytes of `value`.
///
/// ```
/// let value = serde_json::json!({"b": 1.0, "a": [true, null]});
/// assert_eq!(awr_domain::canonical::jcs(&value)?, br#"{"a":[true,null],"b":1}"#);
/// # Ok::<(), awr_domain::canonical::CanonicalError>(())
/// ```
pub fn jcs(value: &impl Serialize) -> Result<Vec<u8>, CanonicalError> {
    serde_json_canonicalizer::to_vec(value).map_err(|e| CanonicalError(e.to_string()))
}

/// Lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Lowercase hex SHA-256 of the canonical form of `value`.
pub fn hash(value: &impl Serialize) -> Result<String, CanonicalError> {
    Ok(sha256_hex(&jcs(value)?))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_order_does_not_change_the_hash_and_types_do() {
        let a = json!({"b": 1, "a": {"y": [1, 2], "x": "s"}});
        let b: serde_json::Value =
            serde_json::from_str(r#"{"a":{"x":"s","y":[1,2]},"b":1}"#).unwrap();
        assert_eq!(jcs(&a).unwrap(), br#"{"a":{"x":"s","y":[1,2]},"b":1}"#);
        assert_eq!(hash(&a).unwrap(), hash(&b).unwrap());
        assert_ne!(
            hash(&json!({"n": 1})).unwrap(),
            hash(&json!({"n": "1"})).unwrap()
        );
        assert_eq!(hash(&a).unwrap().len(), 64);
    }

    /// RFC 8785's edges: keys sorted by UTF-16 code units (where that
    /// differs from UTF-8 and code point order), ECMAScript number forms,
    /// and an input whose keys come in another order than sorted (what
    /// serde_json's `preserve_order` or a struct's field order gives).
    #[test]
    fn keys_sort_by_utf16_and_numbers_take_their_ecmascript_form() {
        // U+FF61 sorts before U+1F600 by UTF-8 and by code point; by UTF-16
        // code units the surrogate 0xD83D comes first.
        let keys = json!({"\u{ff61}": 1, "\u{1f600}": 2, "a": 3});
        assert_eq!(
            String::from_utf8(jcs(&keys).unwrap()).unwrap(),
            "{\"a\":3,\"\u{1f600}\":2,\"\u{ff61}\":1}"
        );
        let numbers = json!([1e21, 1e-7, 100.0, -0.0, 9_007_199_254_740_993_u64, 0.1]);
        assert_eq!(
            String::from_utf8(jcs(&numbers).unwrap()).unwrap(),
            "[1e+21,1e-7,100,0,9007199254740992,0.1]"
        );

        #[derive(Serialize)]
        struct Unsorted {
            zeta: u8,
            alpha: &'static str,
            mid: [u8; 2],
        }
        let written = Unsorted {
            zeta: 1,
            alpha: "a",
            mid: [2, 1],
        };
        let sorted: serde_json::Value =
            serde_json::from_str(r#"{"alpha":"a","mid":[2,1],"zeta":1}"#).unwrap();
        assert_eq!(jcs(&written).unwrap(), jcs(&sorted).unwrap());
        assert_eq!(hash(&written).unwrap(), hash(&sorted).unwrap());
        // Arrays keep their order: another order is another value.
        assert_ne!(
            hash(&json!({"mid": [1, 2]})).unwrap(),
            hash(&json!({"mid": [2, 1]})).unwrap()
        );
    }
}
