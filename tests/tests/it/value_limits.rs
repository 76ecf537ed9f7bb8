//! Context values a checkpoint cannot hold are refused when they are set, on
//! every store alike, and no checkpoint is ever written that cannot be read
//! back (issue 8: values nested too deep, values too large).
//!
//! The exactness of the limits (a value at a limit decodes, one past it is
//! refused) is checked property-style against the decoder at small limits in
//! `fluxio-core`'s unit tests (`value` and `store::checkpoint`); here, the
//! public limits themselves.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use fluxio::store::{Checkpoint, CheckpointStore, InMemoryStore, MAX_PAYLOAD};
use fluxio::value::MAX_DEPTH;
use fluxio::{
    Context, Error, Outcome, Pipeline, RunStatus, StageResult, Value, ctx, pipeline, stage,
};

/// `Some(Some(...(0)))` with its innermost value at depth `depth`.
fn nested(depth: usize) -> Value {
    let mut v = Value::U64(0);
    for _ in 0..depth {
        v = Value::Some(Box::new(v));
    }
    v
}

fn assert_too_deep(result: fluxio::Result<Context>, key: &str) {
    match result {
        Err(Error::ValueTooDeep { key: k, limit }) => {
            assert_eq!(k, key);
            assert_eq!(limit as usize, MAX_DEPTH);
        }
        other => panic!("expected ValueTooDeep for `{key}`, got {other:?}"),
    }
}

/// The smallest store that persists `to_bytes()`.
#[derive(Debug, Default)]
struct ByteStore(Mutex<HashMap<String, Vec<u8>>>);

impl ByteStore {
    fn map(&self) -> fluxio::Result<std::sync::MutexGuard<'_, HashMap<String, Vec<u8>>>> {
        self.0.lock().map_err(|_| Error::store("bytes", "poisoned"))
    }
}

#[async_trait::async_trait]
impl CheckpointStore for ByteStore {
    async fn save(&self, checkpoint: Checkpoint) -> fluxio::Result<()> {
        let bytes = checkpoint.to_bytes()?;
        self.map()?.insert(checkpoint.key(), bytes);
        Ok(())
    }
    async fn load(&self, run_id: &str) -> fluxio::Result<Option<Checkpoint>> {
        let bytes = self.map()?.get(run_id).cloned();
        bytes
            .map(|b| Checkpoint::from_bytes(run_id, &b))
            .transpose()
    }
    async fn delete(&self, run_id: &str) -> fluxio::Result<()> {
        self.map()?.remove(run_id);
        Ok(())
    }
    async fn exists(&self, run_id: &str) -> fluxio::Result<bool> {
        Ok(self.map()?.contains_key(run_id))
    }
}

// ---- depth ---------------------------------------------------------------------

#[test]
fn a_value_nested_past_max_depth_is_refused_at_set_naming_the_key() {
    let ctx = Context::new();
    assert_too_deep(ctx.clone().set("deep", nested(MAX_DEPTH + 1)), "deep");
    assert_too_deep(ctx! { "ok" => 1, "deep" => nested(MAX_DEPTH + 1) }, "deep");
    assert_too_deep(
        ctx.clone()
            .update::<Value, _>("deep", |_| nested(MAX_DEPTH + 1)),
        "deep",
    );

    // Exactly at the limit: accepted, and it survives a byte checkpoint.
    let ok = ctx
        .set("deep", nested(MAX_DEPTH))
        .expect("MAX_DEPTH is allowed");
    let cp = checkpoint("r", &ok);
    let back = Checkpoint::from_bytes("r", &cp.to_bytes().expect("encodes")).expect("decodes");
    assert_eq!(back, cp);
    assert_eq!(
        back.context.get("deep").as_deref(),
        Some(&nested(MAX_DEPTH))
    );
}

#[test]
fn a_typed_value_nested_past_max_depth_is_refused_too() {
    // A user type rather than a `Value`: a linked list, one `Some` and one
    // struct (a map) per link.
    #[derive(serde::Serialize)]
    struct Link {
        next: Option<Box<Link>>,
    }
    let mut list = Link { next: None };
    for _ in 0..MAX_DEPTH {
        list = Link {
            next: Some(Box::new(list)),
        };
    }
    assert_too_deep(Context::new().set("list", &list), "list");
}

#[test]
fn a_deep_value_that_bypassed_set_is_a_typed_error_when_saved_not_a_corrupt_checkpoint() {
    // `set_value` takes an already converted `Value` and is not checked; the
    // checkpoint encoder still refuses it, naming the key.
    let ctx = Context::new().set_value("deep", nested(MAX_DEPTH + 1));
    match checkpoint("r", &ctx).to_bytes() {
        Err(Error::ValueTooDeep { key, limit }) => {
            assert_eq!(key, "deep");
            assert_eq!(limit as usize, MAX_DEPTH);
        }
        other => panic!("expected ValueTooDeep, got {other:?}"),
    }
}

#[stage]
fn deepen(ctx: Context) -> StageResult {
    let depth: usize = ctx.get("depth")?;
    Ok(ctx.set("deep", nested(depth))?)
}

#[stage]
fn after(ctx: Context) -> StageResult {
    Ok(ctx.set("after", true)?)
}

fn deep_pipeline(store: Arc<dyn CheckpointStore>) -> Pipeline {
    pipeline![deepen, after]
        .name("test")
        .store_arc(store)
        .build()
        .expect("a valid pipeline")
}

#[tokio::test]
async fn a_deep_value_fails_the_same_way_on_the_memory_store_and_a_byte_store() {
    let stores: [(&str, Arc<dyn CheckpointStore>); 2] = [
        ("memory", Arc::new(InMemoryStore::new())),
        ("bytes", Arc::new(ByteStore::default())),
    ];
    let mut outcomes = Vec::new();
    for (name, store) in stores {
        let p = deep_pipeline(store.clone());
        let input = Context::new()
            .set("depth", MAX_DEPTH + 1)
            .expect("a number");
        let err = p
            .invoke("deep-1", input)
            .await
            .expect_err(&format!("{name}: a too deep value fails the stage"));
        match err.stage_error::<Error>() {
            Some(Error::ValueTooDeep { key, limit }) => {
                assert_eq!(key, "deep", "{name}");
                assert_eq!(*limit as usize, MAX_DEPTH, "{name}");
            }
            _ => panic!("{name}: expected stage `deepen` failing with ValueTooDeep, got {err:?}"),
        }
        assert_eq!(err.stage(), Some("deepen"), "{name}");
        let cp = p
            .checkpoint("deep-1")
            .await
            .expect("store works")
            .expect("saved");
        assert_eq!(cp.status, RunStatus::Failed, "{name}");
        assert_eq!(cp.step, "deepen", "{name}");
        outcomes.push((err.to_string(), cp.context.to_context()));

        // At the limit, the run completes and its checkpoint reads back.
        let input = Context::new().set("depth", MAX_DEPTH).expect("a number");
        let out = p
            .invoke("deep-2", input)
            .await
            .and_then(Outcome::completed)
            .expect("MAX_DEPTH is allowed");
        assert_eq!(
            out.value("deep").as_deref(),
            Some(&nested(MAX_DEPTH)),
            "{name}"
        );
        let cp = p
            .checkpoint("deep-2")
            .await
            .expect("readable")
            .expect("saved");
        assert_eq!(cp.status, RunStatus::Completed, "{name}");
        assert_eq!(cp.context.to_context(), out, "{name}");
    }
    assert_eq!(outcomes[0], outcomes[1], "memory and byte store differ");
}

// ---- size ----------------------------------------------------------------------

/// `n` bytes of a plain sequence of `u8`, made as they are serialized (no
/// buffer behind them): what a huge `Vec<u8>` looks like to the writer,
/// without the memory.
struct LazyBytes(usize);

impl serde::Serialize for LazyBytes {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(std::iter::repeat_n(1u8, self.0))
    }
}

#[test]
fn rule17_a_plain_vec_u8_costs_a_byte_per_byte_and_reads_back_from_a_byte_store() {
    // A plain `Vec<u8>` (no `serde_bytes`) of 2^25 elements: refused before
    // (one `Value` per element), now a packed sequence of 2^25 bytes.
    let big: Vec<u8> = (0..1usize << 25).map(|i| (i % 253) as u8).collect();
    let ctx = Context::new()
        .set("blob", &big)
        .expect("a 32 MiB Vec<u8> is set");
    let bytes = checkpoint("r", &ctx).to_bytes().expect("checkpointed");
    assert!(bytes.len() < (1 << 25) + 200, "{} bytes", bytes.len());
    let back = Checkpoint::from_bytes("r", &bytes).expect("decodes");
    assert_eq!(
        back.context
            .to_context()
            .get::<Vec<u8>>("blob")
            .expect("read"),
        big
    );
    // A sequence of bytes made lazily reads back the same way.
    let lazy = Context::new().set("blob", LazyBytes(1000)).expect("set");
    assert_eq!(lazy.get::<Vec<u8>>("blob").expect("read"), vec![1u8; 1000]);
}

#[test]
fn rule17_a_sequence_past_the_payload_limit_is_refused_at_set_naming_key_and_size() {
    // Refused before a byte of it is written: a sequence of known length
    // takes at least a byte per element.
    for n in [MAX_PAYLOAD, MAX_PAYLOAD + 1, usize::MAX / 2] {
        match Context::new().set("blob", LazyBytes(n)) {
            Err(e @ Error::ValueTooLarge { .. }) => {
                let Error::ValueTooLarge { key, size, limit } = &e else {
                    unreachable!()
                };
                assert_eq!(key, "blob");
                assert_eq!(*limit, MAX_PAYLOAD as u64);
                assert!(*size > *limit && *size >= n as u64, "{size}");
                let message = e.to_string();
                assert!(
                    message.contains("`blob`") && message.contains(&size.to_string()),
                    "{message}"
                );
            }
            other => panic!("expected ValueTooLarge, got {:?}", other.map(|c| c.len())),
        }
    }
    // A real (zeroed, untouched) buffer too: its slice is refused whole.
    let zeros = vec![0u8; MAX_PAYLOAD];
    assert!(matches!(
        Context::new().set("zeros", &zeros),
        Err(Error::ValueTooLarge { ref key, .. }) if key == "zeros"
    ));
}

#[test]
fn strings_and_byte_buffers_past_the_payload_limit_are_refused_at_set() {
    // Zeroed allocations are not touched: these cost address space, not memory.
    let bytes = vec![0u8; MAX_PAYLOAD];
    match Context::new().set("bytes", serde_bytes::Bytes::new(&bytes)) {
        Err(Error::ValueTooLarge { key, size, limit }) => {
            assert_eq!(key, "bytes");
            assert!(size > limit, "{size} <= {limit}");
            assert!(limit <= MAX_PAYLOAD as u64);
        }
        other => panic!("expected ValueTooLarge, got {:?}", other.map(|c| c.len())),
    }
    let text = String::from_utf8(bytes).expect("zeros are UTF-8");
    match Context::new().set("text", text.as_str()) {
        Err(Error::ValueTooLarge { key, size, limit }) => {
            assert_eq!(key, "text");
            assert!(size > limit, "{size} <= {limit}");
        }
        other => panic!("expected ValueTooLarge, got {:?}", other.map(|c| c.len())),
    }
}

#[test]
fn a_checkpoint_over_the_payload_limit_is_refused_when_saved_naming_the_run() {
    // Two buffers, each well under the limit, together over it. `set_value`
    // with zeroed buffers keeps this test's memory small.
    let half = MAX_PAYLOAD / 2 + 1;
    let ctx = Context::new()
        .set_value("a", Value::Bytes(vec![0; half]))
        .set_value("b", Value::Bytes(vec![0; half]));
    match checkpoint("too-big", &ctx).to_bytes() {
        Err(e @ Error::CheckpointTooLarge { .. }) => {
            let Error::CheckpointTooLarge {
                run_id,
                size,
                limit,
            } = &e
            else {
                unreachable!()
            };
            assert_eq!(run_id, "too-big");
            assert_eq!(*limit, MAX_PAYLOAD as u64);
            assert!(*size > *limit && *size < 2 * *limit, "{size}");
            assert!(e.to_string().contains("`too-big`"), "{e}");
        }
        other => panic!(
            "expected CheckpointTooLarge, got {:?}",
            other.map(|b| b.len())
        ),
    }
}

#[stage]
fn bloat(ctx: Context) -> StageResult {
    let len: usize = ctx.get("len")?;
    Ok(ctx.set("blob", LazyBytes(len))?)
}

#[tokio::test]
async fn rule17_a_large_vector_fails_the_same_way_on_the_memory_store_and_a_byte_store() {
    let stores: [(&str, Arc<dyn CheckpointStore>); 2] = [
        ("memory", Arc::new(InMemoryStore::new())),
        ("bytes", Arc::new(ByteStore::default())),
    ];
    for (name, store) in stores {
        let p = pipeline![bloat, after]
            .name("test")
            .store_arc(store)
            .build()
            .expect("a valid pipeline");
        let input = Context::new()
            .set("len", MAX_PAYLOAD + 1)
            .expect("a number");
        let err = p
            .invoke("big", input)
            .await
            .expect_err(&format!("{name}: refused"));
        match err.stage_error::<Error>() {
            Some(Error::ValueTooLarge { key, size, limit }) => {
                assert_eq!(key, "blob", "{name}");
                assert!(*size > *limit, "{name}");
            }
            _ => panic!("{name}: expected ValueTooLarge, got {err:?}"),
        }
        let cp = p.checkpoint("big").await.expect("readable").expect("saved");
        assert_eq!(cp.status, RunStatus::Failed, "{name}");
        // 2^25 elements: refused before, set and checkpointed now.
        let input = Context::new().set("len", 1usize << 25).expect("a number");
        let out = p
            .invoke("fits", input)
            .await
            .and_then(Outcome::completed)
            .expect("fits");
        let cp = p
            .checkpoint("fits")
            .await
            .expect("readable")
            .expect("saved");
        assert_eq!(cp.status, RunStatus::Completed, "{name}");
        assert_eq!(cp.context.to_context(), out, "{name}");
        assert_eq!(out.get::<Vec<u8>>("blob").expect("read").len(), 1 << 25);
    }
}

fn checkpoint(run_id: &str, ctx: &Context) -> Checkpoint {
    let mut cp = Checkpoint::new(run_id, "0123456789ab", 1, "s", ctx.snapshot());
    cp.created_at_ms = 1;
    cp.updated_at_ms = 2;
    cp
}
