//! `Display` for [`Value`]: a compact rendering for humans.

use std::collections::BTreeMap;
use std::fmt;

use super::{Packed, Value};

fn fmt_packed(f: &mut fmt::Formatter<'_>, packed: &Packed) -> fmt::Result {
    fn list<T>(f: &mut fmt::Formatter<'_>, items: &[T], one: fn(&T) -> String) -> fmt::Result {
        f.write_str("[")?;
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(&one(item))?;
        }
        f.write_str("]")
    }
    match packed {
        Packed::U8(v) => list(f, v, ToString::to_string),
        Packed::I8(v) => list(f, v, ToString::to_string),
        Packed::U16(v) => list(f, v, ToString::to_string),
        Packed::I16(v) => list(f, v, ToString::to_string),
        Packed::U32(v) => list(f, v, ToString::to_string),
        Packed::I32(v) => list(f, v, ToString::to_string),
        Packed::U64(v) => list(f, v, ToString::to_string),
        Packed::I64(v) => list(f, v, ToString::to_string),
        Packed::F32(v) => list(f, v, |x| format!("{x:?}")),
        Packed::F64(v) => list(f, v, |x| format!("{x:?}")),
        Packed::Bool(v) => list(f, v, ToString::to_string),
    }
}

fn fmt_seq(f: &mut fmt::Formatter<'_>, items: &[Value]) -> fmt::Result {
    f.write_str("[")?;
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write!(f, "{item}")?;
    }
    f.write_str("]")
}

fn fmt_map(f: &mut fmt::Formatter<'_>, map: &BTreeMap<Value, Value>) -> fmt::Result {
    f.write_str("{")?;
    for (i, (key, value)) in map.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write!(f, "{key}: {value}")?;
    }
    f.write_str("}")
}

/// Compact, single-line, JSON-like rendering meant for humans (logs, diffs):
/// `()`, `null`, `true`, `42`, `1.0`, `NaN`, `'c'`, `"text"`, `b"\x00ab"`,
/// `[1, 2]` (a packed sequence too: `[0.5, 1.0]` for `f32`s, shown as
/// `f32`), `{"key": 1}`, and enums as `Variant`, `Variant(v)`,
/// `Variant[a, b]` or `Variant{"field": v}`. `Some(v)` renders as `v`.
impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Unit => f.write_str("()"),
            Value::Bool(v) => write!(f, "{v}"),
            Value::I64(v) => write!(f, "{v}"),
            Value::U64(v) => write!(f, "{v}"),
            Value::I128(v) => write!(f, "{v}"),
            Value::U128(v) => write!(f, "{v}"),
            Value::F64(v) => write!(f, "{v:?}"),
            Value::Char(v) => write!(f, "{v:?}"),
            Value::String(v) => write!(f, "{v:?}"),
            Value::Bytes(v) => write!(f, "b\"{}\"", v.escape_ascii()),
            Value::None => f.write_str("null"),
            Value::Some(v) => write!(f, "{v}"),
            Value::Seq(items) => fmt_seq(f, items),
            Value::Map(map) => fmt_map(f, map),
            Value::Packed(p) => fmt_packed(f, p),
            Value::Enum { variant, value } => {
                f.write_str(variant)?;
                match &**value {
                    Value::Unit => Ok(()),
                    Value::Seq(items) => fmt_seq(f, items),
                    Value::Packed(p) => fmt_packed(f, p),
                    Value::Map(map) => fmt_map(f, map),
                    other => write!(f, "({other})"),
                }
            }
        }
    }
}

impl Value {
    /// The first `max_chars` characters of the value's [`Display`](fmt::Display)
    /// text, and whether there was more. Rendering stops there, so a
    /// 50 MB value costs `max_chars`, not 50 MB (what the CLI and the
    /// console show of a large value).
    ///
    /// ```
    /// use fluxio_core::Value;
    /// let long = Value::String("x".repeat(1_000_000));
    /// let (text, cut) = long.display_prefix(5);
    /// assert_eq!((text.as_str(), cut), ("\"xxxx", true));
    /// assert_eq!(Value::U64(42).display_prefix(5), ("42".to_owned(), false));
    /// ```
    #[must_use]
    pub fn display_prefix(&self, max_chars: usize) -> (String, bool) {
        struct Bounded {
            text: String,
            left: usize,
            cut: bool,
        }
        impl fmt::Write for Bounded {
            fn write_str(&mut self, s: &str) -> fmt::Result {
                for c in s.chars() {
                    if self.left == 0 {
                        self.cut = true;
                        return Err(fmt::Error);
                    }
                    self.text.push(c);
                    self.left -= 1;
                }
                Ok(())
            }
        }
        let mut out = Bounded {
            text: String::new(),
            left: max_chars,
            cut: false,
        };
        // an `Err` here is only the writer refusing more
        let _ = fmt::Write::write_fmt(&mut out, format_args!("{self}"));
        (out.text, out.cut)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use crate::value::{Value, enum_value};

    #[test]
    fn display_is_pinned() {
        let mut fields = BTreeMap::new();
        fields.insert(Value::from("b"), Value::F64(1.0));
        fields.insert(Value::from("a"), Value::Some(Box::new(Value::I64(-3))));
        let mut map = BTreeMap::new();
        map.insert(Value::from("name"), Value::from("x\"y\n"));
        map.insert(Value::U64(7), Value::Bytes(vec![b'a', 0, 255, b'"']));
        map.insert(
            Value::from("list"),
            Value::Seq(vec![
                Value::Unit,
                Value::None,
                Value::Bool(false),
                Value::Char('c'),
                Value::F64(f64::NAN),
                Value::F64(f64::INFINITY),
                Value::U128(u128::MAX),
            ]),
        );
        map.insert(
            Value::from("shapes"),
            Value::Seq(vec![
                enum_value("Empty", Value::Unit),
                enum_value("Circle", Value::U64(3)),
                enum_value("Rect", Value::Seq(vec![Value::I64(1), Value::I64(2)])),
                enum_value("Poly", Value::Map(fields)),
            ]),
        );
        map.insert(Value::from("empty"), Value::Map(BTreeMap::new()));
        let value = Value::Map(map);
        assert_eq!(
            value.to_string(),
            concat!(
                r#"{7: b"a\x00\xff\"", "empty": {}, "list": [(), null, false, 'c', NaN, inf, "#,
                r#"340282366920938463463374607431768211455], "name": "x\"y\n", "#,
                r#""shapes": [Empty, Circle(3), Rect[1, 2], Poly{"a": -3, "b": 1.0}]}"#,
            )
        );
    }
}
