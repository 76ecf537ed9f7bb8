//! `fluxio runs diff A B`: the context keys that differ between two points
//! (a run's latest checkpoint, or `RUN@STEP`), read through
//! [`fluxio_core::history::checkpoint_at`] and compared by [`Diff::between`].

use fluxio_core::history::checkpoint_at;
use fluxio_core::{CheckpointStore, Diff, Value};
use serde_json::{Map, Value as Json, json};

use super::Out;
use crate::args::DiffArgs;
use crate::exit::Failure;
use crate::render::{SHORT, Table, one_line, shown, value_json, value_text};

pub(crate) async fn diff(
    out: &mut Out<'_>,
    store: &dyn CheckpointStore,
    args: &DiffArgs,
) -> Result<(), Failure> {
    let a = checkpoint_at(store, &args.a).await?;
    let b = checkpoint_at(store, &args.b).await?;
    let diff = Diff::between(
        &args.a,
        &a.context.to_context(),
        &args.b,
        &b.context.to_context(),
    );
    if out.json {
        let entries: Vec<Json> = diff
            .entries
            .iter()
            .map(|e| {
                let mut entry = Map::new();
                entry.insert("key".to_owned(), json!(e.key));
                if let Some(v) = &e.a {
                    entry.insert("a".to_owned(), value_json(v));
                }
                if let Some(v) = &e.b {
                    entry.insert("b".to_owned(), value_json(v));
                }
                Json::Object(entry)
            })
            .collect();
        return out.json(&json!({ "a": args.a, "b": args.b, "entries": entries }));
    }
    if diff.is_empty() {
        writeln!(
            out.out,
            "no differences between {} and {}",
            shown(&args.a),
            shown(&args.b)
        )?;
        return Ok(());
    }
    let show = |value: &Option<Value>, bytes: Option<usize>| {
        value.as_ref().map_or_else(
            || "<absent>".to_owned(),
            |v| value_text(v, bytes.unwrap_or(0), SHORT / 2),
        )
    };
    let (a_head, b_head) = (shown(&args.a), shown(&args.b));
    let mut table = Table::new(["KEY", &*a_head, &*b_head]);
    for e in &diff.entries {
        table.row(vec![
            one_line(&shown(&e.key), SHORT),
            show(&e.a, a.context.encoded_len(&e.key)),
            show(&e.b, b.context.encoded_len(&e.key)),
        ]);
    }
    write!(out.out, "{}", table.render(out.colour))?;
    Ok(())
}
