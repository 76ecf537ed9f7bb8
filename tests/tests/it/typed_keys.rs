//! Typed keys: a `Key<T>` constant names a context key and the type of its
//! value, taken by `get`, `set`, `update`, `try_get` and by the stage
//! attributes `reads`/`writes`; string keys keep working beside them.

use fluxio::{Context, Error, InMemoryStore, Key, Pipeline, StageResult, pipeline, stage};

const ORDER_ID: Key<u64> = Key::new("order_id");
const TOTAL: Key<u64> = Key::new("total_cents");
const TAX: Key<u64> = Key::new("tax_cents");
const NOTE: Key<String> = Key::new("note");

#[test]
fn typed_keys_read_and_write_their_type_and_interoperate_with_strings() {
    let ctx = Context::new()
        .set(ORDER_ID, 7)
        .and_then(|c| c.set(NOTE, "gift".to_owned()))
        .expect("set");
    let id = ctx.get(ORDER_ID).expect("get"); // inferred: u64
    assert_eq!(id, 7);
    assert_eq!(
        ctx.get::<u64>("order_id").expect("the same value by name"),
        7
    );
    let ctx = ctx
        .update(ORDER_ID, |n| n.unwrap_or(0) + 1)
        .expect("update");
    assert_eq!(ctx.get(ORDER_ID).expect("get"), 8);
    assert_eq!(ctx.try_get(TOTAL).expect("absent is fine"), None);
    let ctx = ctx.remove(NOTE);
    assert!(!ctx.contains_key(NOTE.name()));
    assert_eq!(format!("{ORDER_ID:?}"), "Key<u64>(\"order_id\")");
    assert_eq!(ORDER_ID.to_string(), "order_id");
}

#[test]
fn a_value_of_another_type_is_an_error_naming_the_key_and_types_not_none() {
    let ctx = Context::new().set("order_id", 300i64).expect("set");
    // the permissive read hides it; the checked one says what is wrong
    const SMALL: Key<u8> = Key::new("order_id");
    assert_eq!(ctx.get_opt(SMALL), None);
    match ctx.try_get(SMALL) {
        Err(Error::WrongType { key, expected, .. }) => {
            assert_eq!(key, "order_id");
            assert_eq!(expected, "u8");
        }
        other => panic!("expected WrongType, got {other:?}"),
    }
    let ctx = Context::new().set("order_id", "o-7").expect("set");
    let err = ctx.get(ORDER_ID).expect_err("a string is not a u64");
    let shown = err.to_string();
    assert!(
        shown.contains("order_id") && shown.contains("u64"),
        "{shown}"
    );
}

#[stage(reads = [ORDER_ID], writes = [TOTAL])]
fn total(ctx: Context) -> StageResult {
    let id = ctx.get(ORDER_ID)?;
    Ok(ctx.set(TOTAL, id * 100)?)
}

#[stage(reads = [ORDER_ID], writes = [TAX])]
fn tax(ctx: Context) -> StageResult {
    let id = ctx.get(ORDER_ID)?;
    Ok(ctx.set(TAX, id * 21)?)
}

#[stage(reads = [TOTAL, "tax_cents"], writes = ["due_cents"])]
fn due(ctx: Context) -> StageResult {
    let due = ctx.get(TOTAL)? + ctx.get(TAX)?;
    Ok(ctx.set("due_cents", due)?)
}

fn orders() -> Pipeline {
    pipeline![total, tax, due]
        .name("typed")
        .store(InMemoryStore::new())
        .build()
        .expect("valid")
}

#[tokio::test]
async fn typed_keys_in_reads_and_writes_drive_auto_parallelism() {
    let p = orders();
    let program = p.explain();
    assert!(
        program.contains("FORK"),
        "total and tax write disjoint typed keys: {program}"
    );
    let out = p
        .invoke("t-1", Context::new().set(ORDER_ID, 3).expect("set"))
        .await
        .expect("runs");
    assert_eq!(out.context().get::<u64>("due_cents").expect("due"), 363);
}

/// The same stage tokens over keys whose names differ: the names count.
macro_rules! keyed {
    ($name:literal) => {
        const K: fluxio::Key<u64> = fluxio::Key::new($name);

        #[fluxio::stage(writes = [K])]
        fn put(ctx: Context) -> StageResult {
            Ok(ctx.set(K, 1)?)
        }

        pub(crate) fn pipeline() -> Pipeline {
            pipeline![put].name("keyed").build().expect("valid")
        }
    };
}

mod named_a {
    use super::*;
    keyed!("a");
}

mod named_a_again {
    use super::*;
    keyed!("a");
}

mod named_b {
    use super::*;
    keyed!("b");
}

#[test]
fn a_typed_keys_name_counts_in_the_version() {
    assert_eq!(
        named_a::pipeline().version(),
        named_a_again::pipeline().version()
    );
    assert_ne!(named_a::pipeline().version(), named_b::pipeline().version());
}
