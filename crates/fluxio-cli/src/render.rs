//! How runs look: values as JSON or as short JSON-like text, times, aligned
//! tables, and the colours of states (only on a terminal, never with
//! `NO_COLOR`).

use std::io::IsTerminal as _;
use std::time::{SystemTime, UNIX_EPOCH};

use fluxio_core::store::RunStatus;
use fluxio_core::value::Packed;
use fluxio_core::{Snapshot, Value};
use serde_json::{Map, Value as Json, json};

/// Values longer than this (in characters) are cut in tables, unless
/// `--full`.
pub(crate) const SHORT: usize = 200;

/// Values whose encoding is larger than this are not put whole into JSON
/// output unless `--full`: a preview and their size instead.
pub(crate) const JSON_WHOLE: usize = 64 * 1024;

/// Whether standard output gets colours: a terminal, `NO_COLOR` unset or
/// empty (<https://no-color.org>), and `TERM` not `dumb`.
pub(crate) fn colour() -> bool {
    std::io::stdout().is_terminal()
        && colour_allowed(
            std::env::var_os("NO_COLOR").as_deref(),
            std::env::var_os("TERM").as_deref(),
        )
}

/// Whether the environment allows colours: `NO_COLOR` unset or empty, and
/// `TERM` not `dumb`.
fn colour_allowed(no_color: Option<&std::ffi::OsStr>, term: Option<&std::ffi::OsStr>) -> bool {
    no_color.is_none_or(|v| v.is_empty()) && term.is_none_or(|t| t != "dumb")
}

/// A context key, run key, run id, stage, version or other name as it is
/// printed: as it is when every character is visible and tells itself
/// apart; otherwise quoted and escaped as Rust writes a string (`{:?}`):
/// control characters (`\n`, `\0`), bidirectional overrides and
/// zero-width characters (`\u{202e}`, `\u{200b}`), other invisible or
/// blank characters, quotes and backslashes. The empty text is `""`, and
/// any whitespace, a space too, quotes the text (so a list of names
/// separated by spaces reads one way only). A text shown as it is never
/// starts with `"`, so no two texts look the same.
pub(crate) fn shown(text: &str) -> std::borrow::Cow<'_, str> {
    let quoted = format!("{text:?}");
    let plain = !text.is_empty()
        && !text.chars().any(char::is_whitespace)
        && quoted.len() == text.len() + 2;
    if plain {
        std::borrow::Cow::Borrowed(text)
    } else {
        std::borrow::Cow::Owned(quoted)
    }
}

pub(crate) fn ms_since_epoch(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `ms` since the Unix epoch as an RFC 3339 time, to the second, UTC.
pub(crate) fn when(ms: u64) -> String {
    let at = UNIX_EPOCH + std::time::Duration::from_millis(ms);
    humantime::format_rfc3339_seconds(at).to_string()
}

/// The state a listing would give a run whose latest checkpoint says
/// `status`, not knowing its lease (a running run may be abandoned).
pub(crate) fn status_name(status: RunStatus) -> &'static str {
    match status {
        RunStatus::Running => "running",
        RunStatus::Failed => "failed",
        RunStatus::Completed => "completed",
        RunStatus::Cancelled => "cancelled",
        RunStatus::NeedsAttention => "needs-attention",
        RunStatus::Sleeping => "sleeping",
        RunStatus::Waiting => "waiting",
        RunStatus::Paused => "paused",
        _ => "unknown",
    }
}

/// The ANSI colour of a state's name.
fn state_colour(name: &str) -> Option<&'static str> {
    Some(match name {
        "running" => "36",         // cyan
        "abandoned" => "33",       // yellow
        "failed" => "31",          // red
        "completed" => "32",       // green
        "cancelled" => "2",        // dim
        "needs-attention" => "35", // magenta
        "paused" => "33",          // yellow
        _ => return None,
    })
}

/// `text` in its state's colour when `on`.
pub(crate) fn paint_state(text: &str, on: bool) -> String {
    match state_colour(text) {
        Some(code) if on => format!("\x1b[{code}m{text}\x1b[0m"),
        _ => text.to_owned(),
    }
}

/// A table of aligned columns, two spaces apart; the header in bold and
/// the state column coloured when `colour`.
#[derive(Debug)]
pub(crate) struct Table {
    head: Vec<String>,
    rows: Vec<Vec<String>>,
    /// The column holding state names, coloured.
    state_column: Option<usize>,
}

impl Table {
    pub(crate) fn new<S: Into<String>>(head: impl IntoIterator<Item = S>) -> Self {
        Table {
            head: head.into_iter().map(Into::into).collect(),
            rows: Vec::new(),
            state_column: None,
        }
    }

    pub(crate) fn state_column(mut self, column: usize) -> Self {
        self.state_column = Some(column);
        self
    }

    pub(crate) fn row(&mut self, row: Vec<String>) {
        self.rows.push(row);
    }

    pub(crate) fn render(&self, colour: bool) -> String {
        let mut widths: Vec<usize> = self.head.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        let mut line = |cells: &mut dyn Iterator<Item = (usize, &str)>, head: bool| {
            let mut text = String::new();
            for (i, cell) in cells {
                let pad = widths[i].saturating_sub(cell.chars().count());
                let shown = if head && colour {
                    format!("\x1b[1m{cell}\x1b[0m")
                } else if self.state_column == Some(i) {
                    paint_state(cell, colour)
                } else {
                    cell.to_owned()
                };
                text.push_str(&shown);
                if i + 1 < widths.len() {
                    text.push_str(&" ".repeat(pad + 2));
                }
            }
            out.push_str(text.trim_end());
            out.push('\n');
        };
        line(&mut self.head.iter().map(String::as_str).enumerate(), true);
        for row in &self.rows {
            line(&mut row.iter().map(String::as_str).enumerate(), false);
        }
        out
    }
}

/// `value` as compact JSON-like text (the context's own rendering), cut at
/// `limit` characters with `… (N bytes)`, N the value's stored size.
pub(crate) fn value_text(value: &Value, bytes: usize, limit: usize) -> String {
    let (mut text, cut) = value.display_prefix(limit);
    if cut {
        text.push_str(&format!("… ({bytes} bytes)"));
    }
    // one line: a newline inside a string is shown escaped already; keys
    // and enum variants could still hold control characters, shown escaped
    // too
    escape_controls(&text)
}

/// `text` with each control character escaped (`\n`, `\u{1b}`).
pub(crate) fn escape_controls(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_debug().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// `text` on one line, cut at `limit` characters with `…`.
pub(crate) fn one_line(text: &str, limit: usize) -> String {
    let line: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if line.chars().count() <= limit {
        return line;
    }
    let mut cut: String = line.chars().take(limit).collect();
    cut.push('…');
    cut
}

/// The context as a JSON object, key by key; with `full` false, a value
/// whose encoding passes [`JSON_WHOLE`] bytes is
/// `{"$truncated": {"bytes": N, "preview": "..."}}`.
pub(crate) fn context_json(context: &Snapshot, full: bool) -> Json {
    let mut map = Map::new();
    for (key, value) in context.iter() {
        let bytes = context.encoded_len(key).unwrap_or(0);
        let shown = if full || bytes <= JSON_WHOLE {
            value_json(&value)
        } else {
            json!({ "$truncated": { "bytes": bytes, "preview": value_text(&value, bytes, SHORT) } })
        };
        map.insert(key.to_owned(), shown);
    }
    Json::Object(map)
}

/// `value` as JSON, in serde's natural form: options and units as `null` or
/// the inner value, enums externally tagged (`"Unit"`, `{"Variant": v}`),
/// bytes and packed sequences as arrays, maps as objects (keys that are not
/// strings written as their text; a map with keys that are neither strings
/// nor scalars as an array of `[key, value]` pairs). Numbers JSON cannot
/// hold exactly (past 64 bits, NaN, infinities) are strings.
pub(crate) fn value_json(value: &Value) -> Json {
    match value {
        Value::Unit | Value::None => Json::Null,
        Value::Bool(b) => Json::Bool(*b),
        Value::I64(n) => json!(n),
        Value::U64(n) => json!(n),
        Value::I128(n) => i64::try_from(*n).map_or_else(|_| json!(n.to_string()), |n| json!(n)),
        Value::U128(n) => u64::try_from(*n).map_or_else(|_| json!(n.to_string()), |n| json!(n)),
        Value::F64(x) => float(*x),
        Value::Char(c) => json!(c.to_string()),
        Value::String(s) => json!(s),
        Value::Bytes(b) => json!(b),
        Value::Some(inner) => value_json(inner),
        Value::Seq(items) => Json::Array(items.iter().map(value_json).collect()),
        Value::Packed(packed) => packed_json(packed),
        Value::Map(entries) => {
            let keys: Option<Vec<String>> = entries.keys().map(key_text).collect();
            match keys {
                Some(keys) => Json::Object(
                    keys.into_iter()
                        .zip(entries.values().map(value_json))
                        .collect(),
                ),
                None => Json::Array(
                    entries
                        .iter()
                        .map(|(k, v)| json!([value_json(k), value_json(v)]))
                        .collect(),
                ),
            }
        }
        Value::Enum { variant, value } => match &**value {
            Value::Unit => json!(variant),
            inner => json!({ variant.as_str(): value_json(inner) }),
        },
    }
}

fn float(x: f64) -> Json {
    serde_json::Number::from_f64(x).map_or_else(|| json!(format!("{x:?}")), Json::Number)
}

fn packed_json(packed: &Packed) -> Json {
    fn all<T: Copy>(items: &[T], one: impl Fn(T) -> Json) -> Json {
        Json::Array(items.iter().map(|x| one(*x)).collect())
    }
    match packed {
        Packed::U8(v) => all(v, |x| json!(x)),
        Packed::I8(v) => all(v, |x| json!(x)),
        Packed::U16(v) => all(v, |x| json!(x)),
        Packed::I16(v) => all(v, |x| json!(x)),
        Packed::U32(v) => all(v, |x| json!(x)),
        Packed::I32(v) => all(v, |x| json!(x)),
        Packed::U64(v) => all(v, |x| json!(x)),
        Packed::I64(v) => all(v, |x| json!(x)),
        Packed::F32(v) => all(v, |x| float(f64::from(x))),
        Packed::F64(v) => all(v, float),
        Packed::Bool(v) => all(v, |x| json!(x)),
    }
}

/// A map key as a JSON object key: strings as they are, scalars as their
/// text (as serde_json writes integer keys); `None` for anything else.
fn key_text(key: &Value) -> Option<String> {
    match key {
        Value::String(s) => Some(s.clone()),
        Value::Char(c) => Some(c.to_string()),
        Value::Bool(_)
        | Value::I64(_)
        | Value::U64(_)
        | Value::I128(_)
        | Value::U128(_)
        | Value::F64(_) => Some(key.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn values_become_natural_json() {
        let mut fields = BTreeMap::new();
        fields.insert(Value::from("id"), Value::U64(7));
        fields.insert(Value::from("tags"), Value::Seq(vec![Value::from("a")]));
        let cases = [
            (Value::Unit, json!(null)),
            (Value::Some(Box::new(Value::I64(-1))), json!(-1)),
            (Value::U128(u128::MAX), json!(u128::MAX.to_string())),
            (Value::I128(-5), json!(-5)),
            (Value::F64(f64::NAN), json!("NaN")),
            (Value::F64(0.5), json!(0.5)),
            (Value::Char('x'), json!("x")),
            (Value::Bytes(vec![0, 255]), json!([0, 255])),
            (
                Value::Packed(Packed::F32(vec![0.5, 1.0])),
                json!([0.5, 1.0]),
            ),
            (Value::Map(fields), json!({"id": 7, "tags": ["a"]})),
            (
                Value::Enum {
                    variant: "Paid".into(),
                    value: Box::new(Value::Unit),
                },
                json!("Paid"),
            ),
            (
                Value::Enum {
                    variant: "Card".into(),
                    value: Box::new(Value::U64(4)),
                },
                json!({"Card": 4}),
            ),
        ];
        for (value, want) in cases {
            assert_eq!(value_json(&value), want, "{value}");
        }
        let mut odd = BTreeMap::new();
        odd.insert(Value::Seq(vec![Value::U64(1)]), Value::Bool(true));
        assert_eq!(value_json(&Value::Map(odd)), json!([[[1], true]]));
        let mut ints = BTreeMap::new();
        ints.insert(Value::U64(3), Value::from("c"));
        assert_eq!(value_json(&Value::Map(ints)), json!({"3": "c"}));
    }

    #[test]
    fn huge_values_are_cut_with_their_size() {
        let big = Value::String("x".repeat(1_000_000));
        let text = value_text(&big, 1_000_005, 20);
        assert_eq!(text, format!("\"{}… (1000005 bytes)", "x".repeat(19)));
        assert_eq!(value_text(&Value::U64(42), 1, 20), "42");
    }

    #[test]
    fn huge_values_are_previewed_in_json() -> fluxio_core::Result<()> {
        let ctx = fluxio_core::Context::new()
            .set("big", vec![7u8; 100_000])?
            .set("small", "s")?;
        let cut = context_json(&ctx.snapshot(), false);
        assert_eq!(cut["small"], json!("s"));
        let bytes = cut["big"]["$truncated"]["bytes"].as_u64().unwrap_or(0);
        assert!(bytes >= 100_000, "{cut}");
        let whole = context_json(&ctx.snapshot(), true);
        assert_eq!(whole["big"].as_array().map(Vec::len), Some(100_000));
        Ok(())
    }

    #[test]
    fn tables_align_and_colour_only_when_asked() {
        let mut t = Table::new(["RUN", "STATE", "ERROR"]).state_column(1);
        t.row(vec!["orders/1".into(), "failed".into(), "boom".into()]);
        t.row(vec!["o/22".into(), "completed".into(), String::new()]);
        assert_eq!(
            t.render(false),
            "RUN       STATE      ERROR\norders/1  failed     boom\no/22      completed\n"
        );
        let coloured = t.render(true);
        assert!(coloured.contains("\x1b[31mfailed\x1b[0m"), "{coloured}");
        assert!(!t.render(false).contains('\x1b'));
    }

    #[test]
    fn names_that_could_be_mistaken_are_quoted_and_escaped() {
        assert_eq!(shown("orders/ok-1"), "orders/ok-1");
        assert_eq!(shown("café"), "café");
        let cases = [
            ("a\nb", r#""a\nb""#),
            ("a b", r#""a b""#),
            ("", r#""""#),
            ("\0", r#""\0""#),
            ("ab\u{202e}lmth", r#""ab\u{202e}lmth""#),
            ("a\u{200b}b", r#""a\u{200b}b""#),
            ("a\u{feff}", r#""a\u{feff}""#),
            ("\"x\"", r#""\"x\"""#),
            ("a\\u{202e}", r#""a\\u{202e}""#),
            ("tab\there", r#""tab\there""#),
            ("nb\u{a0}sp", r#""nb\u{a0}sp""#),
        ];
        for (text, want) in cases {
            assert_eq!(shown(text), want, "{text:?}");
        }
        // every one looks unlike every other, and unlike the plain ones
        let mut all: Vec<String> = cases.iter().map(|(t, _)| shown(t).into_owned()).collect();
        all.push(shown("ab").into_owned());
        all.push(shown("a").into_owned());
        let count = all.len();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), count);
    }

    #[test]
    fn colour_is_refused_by_no_color_and_a_dumb_terminal() {
        use std::ffi::OsStr;
        let on = |no_color: Option<&str>, term: Option<&str>| {
            colour_allowed(no_color.map(OsStr::new), term.map(OsStr::new))
        };
        assert!(on(None, Some("xterm-256color")));
        assert!(on(Some(""), None));
        assert!(!on(Some("1"), Some("xterm")));
        assert!(!on(None, Some("dumb")));
    }

    #[test]
    fn control_characters_in_enum_variants_are_escaped() {
        // strings are escaped by the value's own rendering; a variant's
        // name is written as it is
        let odd = Value::Enum {
            variant: "Paid\u{1}".into(),
            value: Box::new(Value::Unit),
        };
        let text = value_text(&odd, 1, 100);
        assert!(!text.chars().any(char::is_control), "{text:?}");
        assert!(text.contains(r"\u{1}"), "{text:?}");
    }

    #[test]
    fn one_line_cuts_and_flattens() {
        assert_eq!(one_line("a\nb", 10), "a b");
        assert_eq!(one_line("abcdef", 3), "abc…");
    }
}
