//! The limits of a context value (see the [module documentation](super#limits)),
//! for callers holding a [`Value`] or converting one.

use serde::Serialize;

use super::MAX_PAYLOAD;
use super::encoded::{encode_entry, key_size, refusal_error};
use super::ser::WireWriter;
use super::{MAX_DEPTH, Value};

/// Whether `value` may be stored under `key` in a context: the check behind
/// [`Context::set`](crate::Context::set), for a value converted already (as
/// [`Context::set_value`](crate::Context::set_value), which does not check,
/// takes it). See the [module documentation](crate::value#limits).
///
/// ```
/// use fluxio_core::value::{check_context_value, MAX_DEPTH};
/// use fluxio_core::{Error, Value};
///
/// let mut deep = Value::Unit;
/// for _ in 0..=MAX_DEPTH {
///     deep = Value::Some(Box::new(deep));
/// }
/// let err = check_context_value("tree", &deep).unwrap_err();
/// assert!(matches!(err, Error::ValueTooDeep { ref key, limit: 128 } if key == "tree"));
/// assert!(check_context_value("small", &Value::from("ok")).is_ok());
/// ```
///
/// # Errors
/// [`Error::ValueTooDeep`](crate::Error::ValueTooDeep) when `value` nests
/// deeper than [`MAX_DEPTH`];
/// [`Error::ValueTooLarge`](crate::Error::ValueTooLarge) when the key and
/// the value's encoding take more than [`MAX_PAYLOAD`] bytes of a
/// checkpoint (`size` and `limit` in bytes). Both name `key`.
pub fn check_context_value(key: &str, value: &Value) -> crate::Result<()> {
    let mut w = WireWriter::new(key_size(key), MAX_PAYLOAD as u64, MAX_DEPTH);
    w.value(value).map_err(|e| refusal_error(key, e))
}

/// Converts `value` for storing under `key` in a context, checking it as
/// [`Context::set`](crate::Context::set) does: the value `set` stores,
/// decoded.
///
/// # Errors
/// [`Error::Serialize`](crate::Error::Serialize) when `value`'s `Serialize`
/// impl fails; [`Error::ValueTooLarge`](crate::Error::ValueTooLarge) when
/// the key and the value's encoding take more than [`MAX_PAYLOAD`] bytes
/// (refused as soon as the writer gets there: `size` is the bytes written by
/// then, or what a sequence, string or byte buffer of known length would
/// take at least); [`Error::ValueTooDeep`](crate::Error::ValueTooDeep) when
/// it nests deeper than [`MAX_DEPTH`]. All name `key`.
pub fn to_context_value<T: Serialize + ?Sized>(key: &str, value: &T) -> crate::Result<Value> {
    Ok(encode_entry(key, value)?.decode())
}
