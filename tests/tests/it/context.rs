//! The context (docs/CONTRACT.md section 1) and the checkpoint encoding (rule 8).

use std::collections::{BTreeMap, HashMap};

use fluxio::store::Checkpoint;
use fluxio::store::backend::FORMAT_VERSION;
use fluxio::{Context, Error, RunStatus, Value, ctx};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Address {
    city: String,
    zip: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Tier {
    Free,
    Paid { seats: u16 },
    Custom(String, u8),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct User {
    id: u64,
    balance: i64,
    score: f64,
    #[serde(with = "serde_bytes")]
    avatar: Vec<u8>,
    addresses: Vec<Address>,
    by_year: BTreeMap<u16, Address>,
    labels: HashMap<String, Vec<String>>,
    tier: Tier,
    nested: Option<Option<Box<User>>>,
}

fn user() -> User {
    User {
        id: u64::MAX,
        balance: i64::MIN,
        score: -0.0,
        avatar: vec![0, 255, 1, 254],
        addresses: vec![
            Address {
                city: "Zürich".into(),
                zip: Some(8001),
            },
            Address {
                city: "東京".into(),
                zip: None,
            },
        ],
        by_year: [(
            2024,
            Address {
                city: "Kyiv".into(),
                zip: None,
            },
        )]
        .into_iter()
        .collect(),
        labels: [("ключ".to_owned(), vec!["🦀".to_owned()])]
            .into_iter()
            .collect(),
        tier: Tier::Paid { seats: 3 },
        nested: Some(Some(Box::new(User {
            id: 0,
            balance: -1,
            score: f64::MIN_POSITIVE,
            avatar: vec![],
            addresses: vec![],
            by_year: BTreeMap::new(),
            labels: HashMap::new(),
            tier: Tier::Custom("x".into(), 255),
            nested: Some(None),
        }))),
    }
}

fn checkpoint(ctx: &Context) -> Checkpoint {
    let mut cp = Checkpoint::new("run:1/ü x", "0123456789ab", 4, "charge", ctx.snapshot());
    cp.status = RunStatus::Failed;
    cp.error_message = Some("stage `charge` failed: declined".into());
    cp.created_at_ms = 1;
    cp.updated_at_ms = 2;
    cp.attempt = 3;
    cp
}

fn through_bytes(ctx: &Context) -> Context {
    let cp = checkpoint(ctx);
    let bytes = cp.to_bytes().expect("encodes");
    let back = Checkpoint::from_bytes(&cp.run_id, &bytes).expect("decodes");
    assert_eq!(back, cp);
    back.context.to_context()
}

#[test]
fn every_value_type_round_trips_losslessly_through_the_binary_checkpoint() {
    let ctx = ctx! {
        "u64_max" => u64::MAX,
        "i64_min" => i64::MIN,
        "u128_max" => u128::MAX,
        "f64" => 0.1 + 0.2,
        "nan" => f64::NAN,
        "neg_inf" => f64::NEG_INFINITY,
        "neg_zero" => -0.0f64,
        "bytes" => serde_bytes::ByteBuf::from(vec![0u8, 1, 2, 255]),
        "unit" => (),
        "tuple" => (1u8, "two", 3.5f32),
        "user" => user(),
        "ключ 🔑" => "значение",
        "tier" => Tier::Free,
    }
    .expect("serializable");
    let back = through_bytes(&ctx);
    assert_eq!(back, ctx);
    assert_eq!(back.get::<u64>("u64_max").expect("read"), u64::MAX);
    assert_eq!(back.get::<i64>("i64_min").expect("read"), i64::MIN);
    assert_eq!(back.get::<u128>("u128_max").expect("read"), u128::MAX);
    assert_eq!(
        back.get::<f64>("f64").expect("read").to_bits(),
        (0.1f64 + 0.2).to_bits()
    );
    assert!(back.get::<f64>("nan").expect("read").is_nan());
    assert_eq!(back.get::<f64>("neg_inf").expect("read"), f64::NEG_INFINITY);
    assert!(
        back.get::<f64>("neg_zero")
            .expect("read")
            .is_sign_negative()
    );
    assert_eq!(
        back.get::<serde_bytes::ByteBuf>("bytes")
            .expect("read")
            .into_vec(),
        [0, 1, 2, 255]
    );
    assert_eq!(
        back.get::<(u8, String, f32)>("tuple").expect("read"),
        (1, "two".into(), 3.5)
    );
    assert_eq!(back.get::<User>("user").expect("read"), user());
    assert_eq!(back.get::<String>("ключ 🔑").expect("read"), "значение");
    assert_eq!(back.get::<Tier>("tier").expect("read"), Tier::Free);
    assert!(
        matches!(back.value("bytes").as_deref(), Some(Value::Bytes(_))),
        "bytes stay bytes, not a list of numbers"
    );
}

#[test]
fn values_are_readable_in_a_diff() {
    let ctx = ctx! { "addr" => Address { city: "Zürich".into(), zip: Some(8001) }, "tier" => Tier::Custom("x".into(), 1) }
        .expect("ok");
    assert_eq!(
        ctx.value("addr").map(|v| v.to_string()).as_deref(),
        Some(r#"{"city": "Zürich", "zip": 8001}"#)
    );
    assert_eq!(
        ctx.value("tier").map(|v| v.to_string()).as_deref(),
        Some(r#"Custom["x", 1]"#)
    );
}

#[test]
fn strict_reads_name_the_key_and_the_type() {
    let ctx = ctx! { "n" => "not a number" }.expect("ok");
    let missing = ctx.get::<u64>("absent").expect_err("missing");
    assert!(matches!(missing, Error::MissingKey { ref key, expected: "u64" } if key == "absent"));
    assert_eq!(
        missing.to_string(),
        "missing context key `absent` (expected u64)"
    );
    let wrong = ctx.get::<u64>("n").expect_err("wrong type");
    match &wrong {
        Error::WrongType {
            key,
            expected,
            found,
            ..
        } => {
            assert_eq!((key.as_str(), *expected, *found), ("n", "u64", "string"));
        }
        other => panic!("expected WrongType, got {other:?}"),
    }
    assert!(
        wrong
            .to_string()
            .starts_with("context key `n` holds string, expected u64"),
        "{wrong}"
    );
    let small = ctx! { "big" => 300u32 }.expect("ok");
    assert!(
        matches!(small.get::<u8>("big"), Err(Error::WrongType { .. })),
        "no silent truncation"
    );
}

#[test]
fn permissive_reads_return_none() {
    let ctx = ctx! { "n" => 1 }.expect("ok");
    assert_eq!(ctx.get_opt::<i32>("n"), Some(1));
    assert_eq!(ctx.get_opt::<String>("n"), None);
    assert_eq!(ctx.get_opt::<i32>("absent"), None);
}

#[test]
fn set_and_update_change_a_clone_not_the_original_and_track_written_keys() {
    let base = ctx! { "n" => 1 }.expect("ok").clear_written();
    let next = base
        .clone()
        .update::<i32, _>("n", |n| n.unwrap_or(0) + 1)
        .expect("ok")
        .set("m", "x")
        .expect("ok");
    assert_eq!(base.get::<i32>("n").expect("unchanged"), 1);
    assert_eq!(next.get::<i32>("n").expect("updated"), 2);
    assert_eq!(base.written().count(), 0);
    assert_eq!(next.written().collect::<Vec<_>>(), ["m", "n"]);
    assert!(matches!(
        next.clone().update::<i32, _>("m", |_| 0),
        Err(Error::WrongType { .. })
    ));
    let removed = next.remove("m");
    assert!(!removed.contains_key("m") && removed.was_written("m"));
}

#[test]
fn fork_shares_data_clears_written_and_merge_applies_branch_writes() {
    let base = ctx! { "keep" => 1, "drop" => 2 }.expect("ok");
    let a = base.fork("a").set("x", 10).expect("ok");
    let b = base.fork("b").remove("drop");
    assert_eq!(a.branch(), Some("a"));
    assert_eq!(
        a.written().collect::<Vec<_>>(),
        ["x"],
        "a fork starts with no writes"
    );
    assert_eq!(a.get::<i32>("keep").expect("shared"), 1);
    let merged = Context::merge(&base, &[a, b]).expect("disjoint");
    assert_eq!(merged.get::<i32>("x").expect("from a"), 10);
    assert!(!merged.contains_key("drop"), "b's removal applies");
    assert_eq!(merged.get::<i32>("keep").expect("base"), 1);
}

#[test]
fn merge_conflict_names_every_conflicting_key_and_branch() {
    let base = Context::new();
    let branches = [
        base.fork("p").set("k", 1).expect("ok"),
        base.fork("q")
            .set("k", 2)
            .expect("ok")
            .set("j", 1)
            .expect("ok"),
        base.fork("r").set("j", 2).expect("ok"),
        base.fork("s").set("free", 1).expect("ok"),
    ];
    let err = Context::merge(&base, &branches).expect_err("conflict");
    assert!(
        matches!(&err, Error::MergeConflict { keys, branches } if keys == &["j", "k"] && branches == &["p", "q", "r"]),
        "{err:?}"
    );
}

#[test]
fn snapshot_is_the_same_data_and_survives_later_writes() {
    let ctx = ctx! { "a" => 1 }.expect("ok");
    let snap = ctx.snapshot();
    let later = ctx.clone().set("a", 2).expect("ok");
    assert_eq!(snap.get("a").as_deref(), Some(&Value::from(1i32)));
    assert_eq!(later.get::<i32>("a").expect("ok"), 2);
    assert_eq!(snap.to_context(), ctx);
}

#[test]
fn a_large_context_round_trips() {
    let big: Vec<u8> = (0..2_000_000u32).map(|i| (i % 251) as u8).collect();
    let ctx = Context::new()
        .set("blob", serde_bytes::ByteBuf::from(big.clone()))
        .expect("ok");
    assert_eq!(
        through_bytes(&ctx)
            .get::<serde_bytes::ByteBuf>("blob")
            .expect("ok")
            .into_vec(),
        big
    );
}

#[test]
fn checkpoint_is_a_serde_type() {
    let ctx = ctx! { "n" => 1u8, "s" => "x" }.expect("ok");
    let cp = checkpoint(&ctx);
    let json = serde_json::to_string(&cp).expect("serializes");
    assert!(json.contains(r#""context":{"n":1,"s":"x"}"#), "{json}");
    let back: Checkpoint = serde_json::from_str(&json).expect("deserializes");
    assert_eq!(back.context.to_context().get::<u8>("n").expect("ok"), 1);
    assert_eq!(back.run_id, cp.run_id);
}

// ---- corrupt and foreign payloads -------------------------------------------

fn good_bytes() -> (String, Vec<u8>) {
    let cp = checkpoint(&ctx! { "user" => user() }.expect("ok"));
    (cp.run_id.clone(), cp.to_bytes().expect("encodes"))
}

fn assert_corrupt(run_id: &str, bytes: &[u8], reason_part: &str) {
    match Checkpoint::from_bytes(run_id, bytes) {
        Err(Error::CorruptCheckpoint {
            run_id: r, reason, ..
        }) => {
            assert_eq!(r, run_id);
            assert!(
                reason.contains(reason_part),
                "reason {reason:?} should mention {reason_part:?}"
            );
        }
        other => panic!("expected CorruptCheckpoint, got {other:?}"),
    }
}

#[test]
fn foreign_truncated_and_newer_payloads_are_typed_errors() {
    let (run_id, bytes) = good_bytes();
    assert_corrupt(&run_id, b"", "shorter than");
    assert_corrupt(&run_id, br#"{"run_id": "x", "json": true}"#, "bad magic");
    let mut newer = bytes.clone();
    newer[4..6].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
    assert_corrupt(
        &run_id,
        &newer,
        &format!("checkpoint format {}", FORMAT_VERSION + 1),
    );
    assert_corrupt(&run_id, &bytes[..bytes.len() - 1], "payload bytes");
    let mut longer = bytes.clone();
    longer.push(0);
    assert_corrupt(&run_id, &longer, "payload bytes");
    assert_corrupt("another-run", &bytes, "belongs to run");
    let err = Checkpoint::from_bytes(&run_id, b"junk").expect_err("corrupt");
    assert!(
        err.to_string()
            .starts_with("corrupt checkpoint for run `run:1/ü x`"),
        "{err}"
    );
}

#[test]
fn every_truncation_and_single_bit_flip_is_detected_without_panicking() {
    let (run_id, bytes) = good_bytes();
    for len in 0..bytes.len() {
        assert!(
            Checkpoint::from_bytes(&run_id, &bytes[..len]).is_err(),
            "truncated to {len}"
        );
    }
    for byte in 0..bytes.len() {
        for bit in 0..8 {
            let mut flipped = bytes.clone();
            flipped[byte] ^= 1 << bit;
            assert!(
                Checkpoint::from_bytes(&run_id, &flipped).is_err(),
                "flip of bit {bit} in byte {byte} went unnoticed"
            );
        }
    }
}
