//! Steps that wait (contract rules 25-26): [`Sleep`] and [`Wait`], the
//! pipeline elements `sleep!(...)`, `wait!(...)` and `wait_any!(...)` of
//! `pipeline!` build (or a program builds by hand, with [`Node::Sleep`](crate::compile::Node::Sleep) and
//! [`Node::Wait`](crate::compile::Node::Wait)).
//!
//! A sleep or a wait is a step of its own, with its own checkpoint. When a
//! durable run reaches one, it writes a checkpoint saying it sleeps (until a
//! wake time) or waits (for named signals, until an optional deadline),
//! gives its lease back and returns [`Outcome::Sleeping`](crate::Outcome)
//! or [`Outcome::Waiting`](crate::Outcome) to its caller: nothing of the run
//! stays in any process. A worker continues it when it is due; a signal
//! ([`Pipeline::signal`](crate::Pipeline::signal)) makes a waiting run due.
//!
//! Times: a wake time or a deadline is either a duration from the moment
//! the run reaches the step ([`Until::After`]), or an instant read from a
//! context key ([`Until::Key`]: an integer of milliseconds since the Unix
//! epoch, a `std::time::SystemTime`, or RFC 3339 text). A duration of zero,
//! or an instant in the past, is due at once: the run goes on without
//! parking. Every wake time is capped at [`MAX_UNTIL_MS`] (the end of year
//! 9999), so a `Duration::MAX` sleep parks the run for good, on every store.

use std::fmt;
use std::time::{Duration, SystemTime};

use serde::de::DeserializeOwned;

use crate::context::Context;
use crate::error::{Error, Result};
use crate::store::{Payload, Pending, WaitName, check_wait_name};
use crate::value::Value;

pub use crate::store::MAX_UNTIL_MS;

/// When a sleep ends, or a wait's deadline passes.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Until {
    /// This long after the run reaches the step (by the pipeline's
    /// [clock](crate::clock::Clock)).
    After(Duration),
    /// The instant held in this context key when the run reaches the step:
    /// milliseconds since the Unix epoch (an integer), a
    /// `std::time::SystemTime`, or RFC 3339 text (`2026-12-24T09:00:00Z`).
    Key(String),
}

impl Until {
    /// The instant this names for a run that reaches the step at `now_ms`
    /// with `ctx`, capped at [`MAX_UNTIL_MS`].
    ///
    /// # Errors
    /// [`Error::MissingKey`] or [`Error::WrongType`] naming the key, when
    /// it does not hold an instant.
    pub fn resolve(&self, now_ms: u64, ctx: &Context) -> Result<u64> {
        let at = match self {
            Until::After(d) => crate::clock::after(now_ms, *d),
            Until::Key(key) => instant_in(ctx, key)?,
        };
        Ok(at.min(MAX_UNTIL_MS))
    }

    /// How the version and the recorded shape spell it.
    fn describe(&self) -> String {
        match self {
            Until::After(d) => format!("{}ms", d.as_millis().min(u128::from(u64::MAX))),
            Until::Key(key) => format!("until {key:?}"),
        }
    }
}

/// The instant under `key`: an integer of milliseconds since the Unix epoch
/// (a negative one is before it: due at once), a `SystemTime`, or RFC 3339
/// text.
fn instant_in(ctx: &Context, key: &str) -> Result<u64> {
    let wrong = |found: &'static str| Error::Validation {
        stage: format!("until {key:?}"),
        message: format!(
            "context key `{key}` holds {found}, not an instant: store milliseconds since the \
             Unix epoch, a `SystemTime`, or RFC 3339 text"
        ),
    };
    let Some(value) = ctx.value(key) else {
        return Err(Error::MissingKey {
            key: key.to_owned(),
            expected: "an instant (milliseconds since the Unix epoch, SystemTime, RFC 3339)",
        });
    };
    match &*value {
        Value::U64(n) => Ok(*n),
        Value::U128(n) => Ok(u64::try_from(*n).unwrap_or(u64::MAX)),
        Value::I64(n) => Ok(u64::try_from((*n).max(0)).unwrap_or(0)),
        Value::I128(n) => Ok(u64::try_from((*n).max(0)).unwrap_or(u64::MAX)),
        Value::String(text) => humantime::parse_rfc3339_weak(text.trim())
            .map(system_ms)
            .map_err(|e| Error::Validation {
                stage: format!("until {key:?}"),
                message: format!(
                    "context key `{key}` holds {text:?}, not an RFC 3339 instant: {e}"
                ),
            }),
        Value::Map(_) => ctx
            .get::<SystemTime>(key)
            .map(system_ms)
            .map_err(|_| wrong("a map that is not a SystemTime")),
        other => Err(wrong(other.kind())),
    }
}

/// Milliseconds since the Unix epoch of `t` (0 before it).
fn system_ms(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A durable sleep (contract rule 25): `sleep!("24h")`, `sleep!(until =
/// "send_at")`. See the [module docs](self).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sleep {
    until: Until,
}

impl Sleep {
    /// A sleep of `d` from the moment the run reaches it.
    #[must_use]
    pub fn after(d: Duration) -> Sleep {
        Sleep {
            until: Until::After(d),
        }
    }

    /// A sleep until the instant held in context key `key`.
    #[must_use]
    pub fn until_key(key: impl Into<String>) -> Sleep {
        Sleep {
            until: Until::Key(key.into()),
        }
    }

    /// When it ends.
    #[must_use]
    pub fn until(&self) -> &Until {
        &self.until
    }

    /// Its step name, as checkpoints and history show it: `sleep(86400000ms)`.
    #[must_use]
    pub fn step_name(&self) -> String {
        format!("sleep({})", self.until.describe())
    }
}

/// The type a wait reads its payload as: its name, and the check that a
/// payload reads as it.
#[derive(Clone, Copy)]
pub(crate) struct PayloadType {
    pub(crate) name: &'static str,
    check: fn(&Payload) -> Result<()>,
}

impl fmt::Debug for PayloadType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

impl PayloadType {
    fn of<T: DeserializeOwned + 'static>() -> Self {
        PayloadType {
            name: std::any::type_name::<T>(),
            check: |payload| payload.deserialize::<T>().map(|_| ()),
        }
    }

    /// Why `payload` is refused (it does not read as this type), or `None`.
    pub(crate) fn refusal(&self, payload: &Payload) -> Option<String> {
        let e = (self.check)(payload).err()?;
        let why = match e {
            Error::WrongType { found, source, .. } => format!("it holds {found}: {source}"),
            e => e.message_with_causes(),
        };
        Some(format!("its payload is not a {}: {why}", self.name))
    }
}

/// One name a [`Wait`] waits for.
#[derive(Clone, Debug)]
pub(crate) struct Slot {
    pub(crate) name: String,
    /// The context key its payload is written to.
    pub(crate) key: String,
    pub(crate) payload: PayloadType,
}

/// What a wait does when its deadline passes without a signal.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum OnTimeout {
    /// The run fails at the wait with [`Error::WaitTimedOut`] (the default
    /// for a wait with a deadline and no routing block).
    Fail,
    /// The routing block after the wait takes its `"timeout"` route (set by
    /// a routing block; the default for a wait with one).
    Route,
    /// The run goes on with this value under the wait's key, as if it had
    /// been signalled (a wait on one name only).
    Value(Payload),
}

/// A durable wait for a signal (contract rule 26): `wait!("approval" as
/// Approval, deadline = "72h")`, or, over several names, `wait_any!(...)`.
/// See the [module docs](self).
///
/// ```
/// use std::time::Duration;
/// use fluxio_core::waiting::{OnTimeout, Until, Wait};
///
/// #[derive(serde::Deserialize)]
/// struct Approval { approved: bool }
///
/// let wait = Wait::on::<Approval>("approval")
///     .into_key("decision")
///     .deadline(Until::After(Duration::from_secs(72 * 3600)))
///     .on_timeout(OnTimeout::Fail);
/// assert_eq!(wait.names(), ["approval"]);
/// assert_eq!(wait.step_name(), "wait(approval)");
/// ```
#[derive(Clone, Debug)]
pub struct Wait {
    pub(crate) slots: Vec<Slot>,
    pub(crate) deadline: Option<Until>,
    pub(crate) timeout: Option<OnTimeout>,
    /// Why a timeout value given to it could not be encoded: a build error.
    refused: Option<String>,
}

impl Wait {
    /// A wait for the signal `name`, its payload read as `T` and written to
    /// the context key `name` (see [`into_key`](Self::into_key)).
    #[must_use]
    pub fn on<T: DeserializeOwned + 'static>(name: impl Into<String>) -> Wait {
        let name = name.into();
        Wait {
            slots: vec![Slot {
                key: name.clone(),
                name,
                payload: PayloadType::of::<T>(),
            }],
            deadline: None,
            timeout: None,
            refused: None,
        }
    }

    /// The same wait, for the signal `name` too (its payload read as `T`,
    /// written to the key `name`): the first signal delivered decides it,
    /// and the other names are closed in the same write.
    #[must_use]
    pub fn or<T: DeserializeOwned + 'static>(mut self, name: impl Into<String>) -> Wait {
        self.slots.extend(Wait::on::<T>(name).slots);
        self
    }

    /// Writes the payload of the name added last to context key `key`.
    #[must_use]
    pub fn into_key(mut self, key: impl Into<String>) -> Wait {
        if let Some(slot) = self.slots.last_mut() {
            slot.key = key.into();
        }
        self
    }

    /// The wait's deadline.
    #[must_use]
    pub fn deadline(mut self, until: Until) -> Wait {
        self.deadline = Some(until);
        self
    }

    /// What happens at the deadline without a signal (default: fail, or the
    /// `"timeout"` route when a routing block follows the wait).
    #[must_use]
    pub fn on_timeout(mut self, timeout: OnTimeout) -> Wait {
        self.timeout = Some(timeout);
        self
    }

    /// [`on_timeout`](Self::on_timeout) with what [`timeout_value`] made of
    /// a value: a value that could not be encoded is a build error.
    #[must_use]
    pub fn on_timeout_value(mut self, value: Result<OnTimeout>) -> Wait {
        match value {
            Ok(timeout) => self.timeout = Some(timeout),
            Err(e) => self.refused = Some(e.message_with_causes()),
        }
        self
    }

    /// The names it waits for, in order.
    #[must_use]
    pub fn names(&self) -> Vec<&str> {
        self.slots.iter().map(|s| s.name.as_str()).collect()
    }

    /// Its step name, as checkpoints and history show it:
    /// `wait(approve|reject)`.
    #[must_use]
    pub fn step_name(&self) -> String {
        format!("wait({})", self.names().join("|"))
    }

    /// The deadline, if it has one.
    #[must_use]
    pub fn deadline_until(&self) -> Option<&Until> {
        self.deadline.as_ref()
    }

    /// What a run waiting here waits for, with its deadline at `until_ms`.
    pub(crate) fn pending(&self, until_ms: Option<u64>) -> Pending {
        let waits = self
            .slots
            .iter()
            .map(|s| WaitName::new(s.name.clone(), s.payload.name))
            .collect();
        Pending::wait(waits, until_ms)
    }

    /// The slot of `name`.
    pub(crate) fn slot(&self, name: &str) -> Option<&Slot> {
        self.slots.iter().find(|s| s.name == name)
    }

    /// The recorded shape's text of it (rule 13): names, types, keys,
    /// deadline and timeout.
    pub(crate) fn describe(&self) -> String {
        let slots: Vec<String> = self
            .slots
            .iter()
            .map(|s| format!("{:?}: {} -> {:?}", s.name, s.payload.name, s.key))
            .collect();
        let deadline = self
            .deadline
            .as_ref()
            .map_or_else(|| "none".to_owned(), Until::describe);
        let timeout = match &self.timeout {
            None => "default",
            Some(OnTimeout::Fail) => "fail",
            Some(OnTimeout::Route) => "route",
            Some(OnTimeout::Value(_)) => "value",
        };
        format!(
            "wait({}; deadline {deadline}; timeout {timeout})",
            slots.join(", ")
        )
    }

    /// Checks the wait as a pipeline element: its names, and its timeout
    /// against its deadline and whether a routing block follows it
    /// (`routes`: its route keys). Sets the timeout a routing block implies.
    pub(crate) fn check(&mut self, routes: Option<&[&str]>) -> Result<()> {
        let step = self.step_name();
        if self.slots.is_empty() {
            return Err(Error::build("a wait needs at least one name"));
        }
        if let Some(why) = &self.refused {
            return Err(Error::build(format!(
                "{step}: its timeout value cannot be stored: {why}"
            )));
        }
        for (i, slot) in self.slots.iter().enumerate() {
            check_wait_name(&slot.name).map_err(|e| Error::build(format!("{step}: {e}")))?;
            if self.slots[..i].iter().any(|s| s.name == slot.name) {
                return Err(Error::build(format!("{step} names `{}` twice", slot.name)));
            }
        }
        if let Some(OnTimeout::Value(_)) = &self.timeout {
            if self.slots.len() > 1 {
                return Err(Error::build(format!(
                    "{step}: a value on timeout needs a wait on one name (which key would it \
                     go to?); route the timeout instead"
                )));
            }
        }
        match (routes, &self.timeout, &self.deadline) {
            (Some(_), Some(OnTimeout::Fail | OnTimeout::Value(_)), _) => {
                return Err(Error::build(format!(
                    "{step} is followed by a routing block, so its timeout takes the \
                     `\"timeout\"` route; drop its other timeout outcome"
                )));
            }
            (None, Some(OnTimeout::Route), _) => {
                return Err(Error::build(format!(
                    "{step} routes its timeout, but no routing block follows it"
                )));
            }
            (None, Some(_), None) => {
                return Err(Error::build(format!(
                    "{step} says what to do at its deadline, but has no deadline"
                )));
            }
            _ => {}
        }
        if let Some(routes) = routes {
            let mut outcomes: Vec<&str> = self.slots.iter().map(|s| s.name.as_str()).collect();
            if self.deadline.is_some() {
                outcomes.push("timeout");
            }
            let missing: Vec<&str> = outcomes
                .iter()
                .filter(|o| !routes.contains(o))
                .copied()
                .collect();
            let unknown: Vec<&str> = routes
                .iter()
                .filter(|r| !outcomes.contains(r))
                .copied()
                .collect();
            if !missing.is_empty() || !unknown.is_empty() {
                return Err(Error::build(format!(
                    "the routing block after {step} must have one route per outcome \
                     ({}): missing {missing:?}, unknown {unknown:?}",
                    outcomes.join(", ")
                )));
            }
            if self.deadline.is_some() {
                self.timeout = Some(OnTimeout::Route);
            }
        } else if self.deadline.is_some() && self.timeout.is_none() {
            self.timeout = Some(OnTimeout::Fail);
        }
        Ok(())
    }
}

/// A value to take at a wait's deadline: [`OnTimeout::Value`] of `value`,
/// or a build error saying why it could not be encoded (what
/// `wait!(..., timeout = value(...))` builds).
///
/// # Errors
/// As [`Payload::new`].
pub fn timeout_value<T: serde::Serialize + ?Sized>(value: &T) -> Result<OnTimeout> {
    Payload::new(value).map(OnTimeout::Value)
}
