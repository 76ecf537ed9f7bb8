//! Declared keys that carry their type: [`Key`], and [`KeyName`], what
//! [`Context::get`], [`set`](Context::set) and the other key-taking methods
//! accept (a typed key or a string).

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use serde::de::DeserializeOwned;

use super::Context;
use crate::error::Result;

/// A context key declared with the type of its value: a typo in its name
/// is a compile error (the constant does not exist), and reading or writing
/// another type is one too.
///
/// ```
/// use fluxio_core::{Context, Key};
///
/// const ORDER_ID: Key<u64> = Key::new("order_id");
/// const CUSTOMER: Key<String> = Key::new("customer");
///
/// # fn main() -> fluxio_core::Result<()> {
/// let ctx = Context::new()
///     .set(ORDER_ID, 42)?
///     .set(CUSTOMER, "ada".to_owned())?;
/// let id = ctx.get(ORDER_ID)?; // a u64, no annotation needed
/// assert_eq!(id, 42);
/// // string keys keep working, and name the same value
/// assert_eq!(ctx.get::<u64>("order_id")?, 42);
/// // a stored value of another type is an error naming the key and both types
/// let ctx = ctx.set("order_id", "not a number")?;
/// assert!(ctx.try_get(ORDER_ID).is_err());
/// # Ok(()) }
/// ```
///
/// `ctx.set(ORDER_ID, "42")` and `let s: String = ctx.get(ORDER_ID)?` do
/// not compile. `#[stage(reads = [ORDER_ID], writes = [TOTAL])]` takes typed
/// keys beside string literals.
pub struct Key<T> {
    name: &'static str,
    value: PhantomData<fn() -> T>,
}

impl<T> Key<T> {
    /// The key `name`, whose value is a `T`.
    #[must_use]
    pub const fn new(name: &'static str) -> Self {
        Key {
            name,
            value: PhantomData,
        }
    }

    /// Its name in the context.
    #[must_use]
    pub const fn name(&self) -> &'static str {
        self.name
    }
}

impl<T> Clone for Key<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Key<T> {}

impl<T> PartialEq for Key<T> {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl<T> Eq for Key<T> {}

impl<T> std::hash::Hash for Key<T> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name.hash(state);
    }
}

impl<T> fmt::Debug for Key<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key<{}>({:?})", std::any::type_name::<T>(), self.name)
    }
}

impl<T> fmt::Display for Key<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

impl<T> AsRef<str> for Key<T> {
    fn as_ref(&self) -> &str {
        self.name
    }
}

/// A key a [`Context`] method takes, whose value is a `T`: a typed
/// [`Key<T>`] (only for its own `T`), or a string (`&str`, `String`,
/// `&String`, `Arc<str>`, ...) for any `T`.
pub trait KeyName<T> {
    /// The key's name in the context.
    fn key_name(&self) -> &str;
}

impl<T> KeyName<T> for Key<T> {
    fn key_name(&self) -> &str {
        self.name
    }
}

impl<T> KeyName<T> for &Key<T> {
    fn key_name(&self) -> &str {
        self.name
    }
}

/// The string types a key is commonly held in.
macro_rules! string_keys {
    ($($ty:ty),*) => {
        $(
            impl<T> KeyName<T> for $ty {
                fn key_name(&self) -> &str {
                    self
                }
            }
        )*
    };
}

string_keys!(
    &str,
    &&str,
    String,
    &String,
    Arc<str>,
    &Arc<str>,
    Box<str>,
    &Box<str>
);

impl<T> KeyName<T> for std::borrow::Cow<'_, str> {
    fn key_name(&self) -> &str {
        self
    }
}

impl Context {
    /// Checked permissive read: `Ok(None)` when `key` is absent, the value
    /// when it holds a `T`, and an error when it holds something else. This
    /// is the read for an optional key whose type matters:
    /// [`get_opt`](Self::get_opt) gives `None` for a value of another type
    /// (a stored 300 read as a `u8`), which hides a bug.
    ///
    /// ```
    /// use fluxio_core::{Context, Error};
    /// # fn main() -> fluxio_core::Result<()> {
    /// let ctx = Context::new().set("retries", 300u32)?;
    /// assert_eq!(ctx.get_opt::<u8>("retries"), None);
    /// assert!(matches!(ctx.try_get::<u8>("retries"), Err(Error::WrongType { .. })));
    /// assert_eq!(ctx.try_get::<u32>("retries")?, Some(300));
    /// assert_eq!(ctx.try_get::<u32>("missing")?, None);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::WrongType`](crate::Error::WrongType) naming the key, the type asked for and the value
    /// found.
    pub fn try_get<T: DeserializeOwned>(&self, key: impl KeyName<T>) -> Result<Option<T>> {
        let key = key.key_name();
        match self.encoded(key) {
            None => Ok(None),
            Some(v) => super::read(key, v).map(Some),
        }
    }
}

/// What a stage's `reads`/`writes` entry names: a string literal or a
/// typed key (used by `#[stage]`'s generated code).
#[doc(hidden)]
pub const fn key_of<T>(key: &Key<T>) -> &'static str {
    key.name
}
