//! Golden checkpoint files: the binary format, pinned.
//!
//! Every file under `tests/fixtures/checkpoints/` decodes to exactly the
//! [`Checkpoint`] built here, and encoding that checkpoint gives the file's
//! bytes again. A change to the encoding (of the header, of a field, of a
//! [`Value`] tag) therefore fails this test; see the README.md in that folder
//! for what to do then.
//!
//! `FLUXIO_BLESS=1 cargo test -p fluxio-tests --test golden_checkpoints`
//! (re)writes the files from the checkpoints below instead of comparing.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use fluxio_core::store::{
    BranchRecord, Change, Checkpoint, Compensation, CompensationStep, FORMAT_VERSION, ForkOrigin,
    MAGIC, Payload, Pending, QueueEntry, Signal, WaitName,
};
use fluxio_core::value::Packed;
use fluxio_core::{Context, Error, RunStatus, StageCode, Structure, Value};

/// The run id every golden checkpoint is stored under.
const RUN_ID: &str = "golden:run/ü 🦀";

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/checkpoints")
}

fn bless() -> bool {
    std::env::var_os("FLUXIO_BLESS").is_some_and(|v| v == "1")
}

fn context(entries: Vec<(&str, Value)>) -> Context {
    entries.into_iter().collect()
}

fn string(s: &str) -> Value {
    Value::String(s.to_owned())
}

fn map(entries: Vec<(Value, Value)>) -> Value {
    Value::Map(entries.into_iter().collect::<BTreeMap<_, _>>())
}

/// A run about to execute its second stage, first attempt.
fn running() -> Checkpoint {
    let mut cp = Checkpoint::new(
        RUN_ID,
        "0123456789abcdef",
        3,
        "enrich",
        context(vec![
            ("user_id", Value::U64(42)),
            ("name", string("Ada")),
            ("score", Value::F64(0.5)),
        ])
        .snapshot(),
    );
    cp.created_at_ms = 1_700_000_000_000;
    cp.updated_at_ms = 1_700_000_000_250;
    cp
}

/// A run whose stage failed on its third attempt.
fn failed() -> Checkpoint {
    let mut cp = Checkpoint::new(
        RUN_ID,
        "fedcba9876543210",
        7,
        "charge",
        context(vec![
            ("amount_cents", Value::I64(-1_999)),
            ("currency", string("EUR")),
            ("retries", Value::Seq(vec![Value::U64(1), Value::U64(2)])),
        ])
        .snapshot(),
    );
    cp.status = RunStatus::Failed;
    cp.error_message =
        Some("stage `charge` failed: card declined (Zahlung abgelehnt 💳)".to_owned());
    cp.created_at_ms = 1_700_000_000_000;
    cp.updated_at_ms = 1_700_000_123_456;
    cp.attempt = 3;
    cp
}

/// A run cancelled after its stage failed (status 3, format 2 only): the
/// failure's position, context, attempt and message stay.
fn cancelled() -> Checkpoint {
    let mut cp = failed();
    cp.status = RunStatus::Cancelled;
    cp.updated_at_ms = 1_700_000_200_000;
    cp
}

/// Every `Value` variant, extreme numbers, NaN bits, bytes and unicode keys.
fn every_value() -> Context {
    let nested = map(vec![
        (
            string("outer"),
            map(vec![(
                Value::U64(7),
                Value::Seq(vec![string("ü"), string("")]),
            )]),
        ),
        (Value::I64(-1), Value::Bool(false)),
        (Value::Unit, Value::None),
    ]);
    context(vec![
        ("unit", Value::Unit),
        ("true", Value::Bool(true)),
        ("false", Value::Bool(false)),
        ("i64_min", Value::I64(i64::MIN)),
        ("i64_max", Value::I64(i64::MAX)),
        ("u64_max", Value::U64(u64::MAX)),
        ("u64_zero", Value::U64(0)),
        ("i128_min", Value::I128(i128::MIN)),
        ("u128_max", Value::U128(u128::MAX)),
        ("nan", Value::F64(f64::NAN)),
        (
            "nan_payload",
            Value::F64(f64::from_bits(0xfff4_0000_dead_beef)),
        ),
        ("inf", Value::F64(f64::INFINITY)),
        ("neg_inf", Value::F64(f64::NEG_INFINITY)),
        ("neg_zero", Value::F64(-0.0)),
        ("f64", Value::F64(0.1 + 0.2)),
        ("char", Value::Char('🦀')),
        ("string", string("значение, 東京, Zürich")),
        ("empty_string", string("")),
        ("bytes", Value::Bytes(vec![0, 1, 127, 128, 254, 255, 0])),
        ("empty_bytes", Value::Bytes(Vec::new())),
        ("none", Value::None),
        ("some_none", Value::Some(Box::new(Value::None))),
        (
            "some_some",
            Value::Some(Box::new(Value::Some(Box::new(Value::U64(1))))),
        ),
        (
            "seq",
            Value::Seq(vec![Value::Unit, Value::I64(-1), string("x")]),
        ),
        ("empty_seq", Value::Seq(Vec::new())),
        ("nested_map", nested),
        ("empty_map", map(Vec::new())),
        (
            "enum_unit",
            Value::Enum {
                variant: "Free".to_owned(),
                value: Box::new(Value::Unit),
            },
        ),
        (
            "enum_struct",
            Value::Enum {
                variant: "Paid".to_owned(),
                value: Box::new(map(vec![(string("seats"), Value::U64(3))])),
            },
        ),
        (
            "enum_tuple",
            Value::Enum {
                variant: "Custom".to_owned(),
                value: Box::new(Value::Seq(vec![string("x"), Value::U64(255)])),
            },
        ),
        ("ключ 🔑 :/ space", string("unicode key")),
        ("", string("empty key")),
    ])
}

/// A finished run: `ip` is the program's length and `step` is empty.
fn completed() -> Checkpoint {
    let mut cp = Checkpoint::new(RUN_ID, "00000000000000ff", 12, "", every_value().snapshot());
    cp.status = RunStatus::Completed;
    cp.created_at_ms = 0;
    cp.updated_at_ms = u64::MAX;
    cp.attempt = u32::MAX;
    cp
}

/// `every_value`, plus what format 3 added: packed sequences of every
/// element type (a plain `Vec<u8>`, `f32`s kept as `f32`s, NaN bits and
/// `-0.0` included), one as a tuple variant's fields and one as a map key.
fn every_value_v3() -> Context {
    let packed = [
        ("packed_u8", Packed::U8(vec![0, 1, 127, 128, 255])),
        ("packed_i8", Packed::I8(vec![i8::MIN, -1, 0, i8::MAX])),
        ("packed_u16", Packed::U16(vec![0, 251, u16::MAX])),
        ("packed_i16", Packed::I16(vec![i16::MIN, -1, i16::MAX])),
        ("packed_u32", Packed::U32(vec![0, u32::MAX])),
        ("packed_i32", Packed::I32(vec![i32::MIN, i32::MAX])),
        ("packed_u64", Packed::U64(vec![u64::MAX, 0])),
        ("packed_i64", Packed::I64(vec![i64::MIN, 1])),
        (
            "packed_f32",
            Packed::F32(vec![
                0.1,
                -0.0,
                f32::NAN,
                f32::from_bits(0x7fc0_dead),
                f32::INFINITY,
            ]),
        ),
        (
            "packed_f64",
            Packed::F64(vec![0.1, -0.0, f64::from_bits(0xfff4_0000_dead_beef)]),
        ),
        ("packed_bool", Packed::Bool(vec![true, false, true])),
    ];
    let mut ctx = every_value();
    for (key, p) in packed {
        ctx = ctx.set_value(key, Value::Packed(p));
    }
    ctx.set_value(
        "packed_inside",
        map(vec![
            (
                Value::Packed(Packed::U16(vec![1, 2])),
                Value::Enum {
                    variant: "Point".to_owned(),
                    value: Box::new(Value::Packed(Packed::I32(vec![-3, 4]))),
                },
            ),
            (string("b"), Value::Unit),
            (string("aa"), Value::Unit),
        ]),
    )
}

/// `completed`, its context `every_value_v3`.
fn completed_v3() -> Checkpoint {
    let mut cp = completed();
    cp.context = every_value_v3().snapshot();
    cp
}

/// The smallest checkpoint: empty context, empty strings.
fn empty() -> Checkpoint {
    let mut cp = Checkpoint::new(RUN_ID, "", 0, "", Context::new().snapshot());
    cp.created_at_ms = 0;
    cp.updated_at_ms = 0;
    cp
}

/// `cp` as formats 2 and 3 write it for the pipeline `orders`, with a structure.
fn named(mut cp: Checkpoint) -> Checkpoint {
    cp.pipeline = "orders".to_owned();
    cp.structure = Some(Arc::new(Structure::new(
        "[validate, enrich, parallel[[email], [sms]], route, routes{\"vip\": [charge], \"\": []}] auto",
        vec![
            StageCode::new("validate", [0x11; 32]),
            StageCode::new("enrich", std::array::from_fn(|i| i as u8)),
            StageCode::new("ä stage 🦀", [0xff; 32]),
        ],
    )));
    cp
}

/// File name, the format it is in, and the checkpoint it must hold. Files
/// of older formats are only decoded (this build writes the newest); files
/// of the newest format must also re-encode byte for byte.
fn goldens() -> Vec<(&'static str, u16, Checkpoint)> {
    vec![
        ("v1_running.bin", 1, running()),
        ("v1_failed.bin", 1, failed()),
        ("v1_completed_every_value.bin", 1, completed()),
        ("v1_empty.bin", 1, empty()),
        ("v2_running.bin", 2, named(running())),
        ("v2_failed.bin", 2, named(failed())),
        ("v2_completed_every_value.bin", 2, named(completed())),
        ("v2_empty.bin", 2, empty()),
        ("v2_cancelled.bin", 2, named(cancelled())),
        ("v3_running.bin", 3, named(running())),
        ("v3_failed.bin", 3, named(failed())),
        ("v3_completed_every_value.bin", 3, named(completed_v3())),
        ("v3_empty.bin", 3, empty()),
        ("v3_cancelled.bin", 3, named(cancelled())),
        ("v3_failed_in_a_block.bin", 3, named(failed_in_a_block())),
        ("v4_running.bin", 4, named(running())),
        ("v4_failed.bin", 4, named(failed())),
        ("v4_completed_every_value.bin", 4, named(completed_v3())),
        ("v4_empty.bin", 4, empty()),
        ("v4_cancelled.bin", 4, named(cancelled())),
        ("v4_failed_in_a_block.bin", 4, named(failed_in_a_block())),
        ("v4_journal.bin", 4, journal()),
        ("v5_sleeping.bin", 5, sleeping()),
        ("v5_waiting_with_mailbox.bin", 5, waiting()),
        (
            "v6_running_with_deadline.bin",
            6,
            with_deadline(named(running())),
        ),
        ("v6_waiting_with_deadline.bin", 6, with_deadline(waiting())),
        ("v7_queued.bin", 7, queued()),
        (
            "v7_running_in_a_queue_with_deadline.bin",
            7,
            in_a_queue(with_deadline(named(running()))),
        ),
        ("v8_failed_for_good.bin", 8, failed_for_good()),
        ("v8_forked_with_changes.bin", 8, forked()),
        ("v8_compensating.bin", 8, compensating()),
    ]
}

/// The running run of `v4_running.bin` as the first checkpoint of a fork
/// of `orders/o-1` at `charge` that set `card` and `currency` and removed
/// `coupon` (rule 20).
fn forked() -> Checkpoint {
    let mut cp = named(running());
    let mut origin = ForkOrigin::new("orders/o-1", "charge");
    origin.set = vec!["card".to_owned(), "currency".to_owned()];
    origin.removed = vec!["coupon".to_owned()];
    cp.forked_from = Some(Box::new(origin));
    cp
}

/// The failed run of `v4_failed.bin` undoing what it did (rule 35): its
/// first compensator done, the second next.
fn compensating() -> Checkpoint {
    let mut cp = named(failed());
    cp.status = RunStatus::Running;
    cp.error_message = None;
    let steps = vec![
        CompensationStep::new(9, "book_hotel", "cancel_hotel"),
        CompensationStep::new(3, "book_flight", "cancel_flight"),
    ];
    let mut comp = Compensation::new("stage `book_car` failed: no car", steps);
    comp.next = 1;
    cp.compensation = Some(Box::new(comp));
    cp
}

/// The failed run of `v4_failed.bin`, failed for good (rule 35: its stage
/// returned a `TerminalError`).
fn failed_for_good() -> Checkpoint {
    let mut cp = named(failed());
    cp.failed_for_good = true;
    cp
}

/// The running run of `v4_running.bin` enqueued (rule 31) under the key
/// `tenant-7` at priority 2, sleeping before its first stage, due an hour
/// after it was written.
fn queued() -> Checkpoint {
    let mut cp = named(running()).parked(Pending::sleep(1_700_003_600_250));
    cp.queue = Some(Box::new(QueueEntry::new(
        "emails",
        Some("tenant-7".to_owned()),
        2,
    )));
    cp
}

/// `cp` as a started run of the queue `emails`, enqueued without a key.
fn in_a_queue(mut cp: Checkpoint) -> Checkpoint {
    cp.queue = Some(Box::new(QueueEntry::new("emails", None, 0).started()));
    cp
}

/// The running run of `v4_running.bin` asleep at its step until an hour
/// after it was written (rule 25).
fn sleeping() -> Checkpoint {
    named(running()).parked(Pending::sleep(1_700_003_600_250))
}

/// The running run of `v4_running.bin` waiting for `approval` or `refusal`
/// until a day after it was written (rule 26), its mailbox holding a
/// delivered signal for another name and a closed one.
fn waiting() -> Checkpoint {
    let waits = vec![
        WaitName::new("approval", "app::Approval"),
        WaitName::new("refusal", "alloc::string::String"),
    ];
    let mut cp = named(running()).parked(Pending::wait(waits, Some(1_700_086_400_250)));
    let payload = Payload::new(&("ok", 7u32)).expect("a payload");
    cp.signals = vec![
        Signal::new("later", payload, "ops team")
            .expect("a name")
            .at(1_700_000_000_100),
        Signal::closed("old", 1_700_000_000_200),
    ];
    cp
}

/// `cp` with a deadline (rule 30), two hours after the runs here start.
fn with_deadline(mut cp: Checkpoint) -> Checkpoint {
    cp.deadline_ms = Some(1_700_007_200_000);
    cp
}

/// A run's journal in one blob (format 4, rules 18 and 20), as a store
/// with the four required methods keeps it: the running checkpoint of
/// `v4_running.bin` (whole, kept from 0), then three deltas: the next stage
/// set a key, changed one and removed one; that stage failed (nothing
/// changed); the run was cancelled there.
fn journal() -> Checkpoint {
    let base = named(running());
    let mut next = base.clone();
    let before = base.context.clone();
    next.context = before
        .to_context()
        .set_value("score", Value::F64(0.75))
        .set_value("tier", string("gold"))
        .remove("name")
        .snapshot();
    next.change = Change::between(&before, &next.context);
    (next.seq, next.ip, next.step, next.updated_at_ms) =
        (1, 5, "score".to_owned(), 1_700_000_000_500);
    let mut failed = next.clone().failed("stage `score` failed: timeout");
    (failed.seq, failed.change, failed.updated_at_ms) = (2, Change::none(), 1_700_000_000_900);
    let mut cancelled = failed.clone().cancelled();
    (cancelled.seq, cancelled.change, cancelled.updated_at_ms) =
        (3, Change::none(), 1_700_000_001_000);
    cancelled.earlier = vec![base, next, failed];
    cancelled
}

/// A run whose parallel block failed in one branch after another finished
/// (format 3 records finished branches, rule 19): the record holds a write
/// and a removal.
fn failed_in_a_block() -> Checkpoint {
    let mut cp = failed();
    cp.step = "parallel(email, sms)".to_owned();
    let done = cp
        .context
        .to_context()
        .clear_written()
        .fork("email")
        .set_value("email_sent", Value::Bool(true))
        .remove("retries");
    cp.branches = vec![BranchRecord::of(0, "email", &done)];
    cp
}

#[test]
fn golden_files_decode_to_the_expected_checkpoints_and_re_encode_identically() {
    let dir = dir();
    if bless() {
        std::fs::create_dir_all(&dir).expect("create the fixtures folder");
    }
    for (name, format, expected) in goldens() {
        let path = dir.join(name);
        let encoded = expected.to_bytes().expect("the golden checkpoint encodes");
        // the format this build writes for it: its files are pinned byte
        // for byte (a run without waits or a deadline is still format 4)
        let newest = u16::from_le_bytes([encoded[4], encoded[5]]) == format;
        if bless() {
            // an older format's files are never rewritten
            if newest {
                std::fs::write(&path, &encoded).expect("write the golden file");
                eprintln!("blessed {} ({} bytes)", path.display(), encoded.len());
            }
            continue;
        }
        let stored = std::fs::read(&path).unwrap_or_else(|e| {
            panic!(
                "cannot read {} ({e}); run with FLUXIO_BLESS=1 to write it",
                path.display()
            )
        });
        assert_eq!(&stored[..4], &MAGIC, "{name}: magic");
        assert_eq!(
            u16::from_le_bytes([stored[4], stored[5]]),
            format,
            "{name}: format version"
        );
        let decoded = Checkpoint::from_bytes(&expected.key(), &stored)
            .unwrap_or_else(|e| panic!("{name} no longer decodes: {e}"));
        assert_eq!(decoded, expected, "{name} decodes to another checkpoint");
        assert_eq!(
            decoded.earlier, expected.earlier,
            "{name} decodes to another journal"
        );
        assert_eq!(
            decoded.signals, expected.signals,
            "{name} decodes to another mailbox"
        );
        if !newest {
            continue;
        }
        assert_eq!(
            decoded.to_bytes().expect("re-encode"),
            stored,
            "{name}: re-encoding the decoded checkpoint changed the bytes"
        );
        assert!(
            encoded == stored,
            "{name}: the encoding of the expected checkpoint changed \
             ({} bytes now, {} in the file); a format change needs new fixtures, \
             see tests/fixtures/checkpoints/README.md",
            encoded.len(),
            stored.len()
        );
    }
}

/// What a store that keeps the journal itself writes per checkpoint
/// ([`Checkpoint::entry_bytes`]) is the same frame with one checkpoint: the
/// deltas of `v4_journal.bin`, written alone, read back on top of its base.
#[test]
fn golden_journal_entries_written_alone_read_back_on_their_base() {
    if bless() {
        return;
    }
    let stored = std::fs::read(dir().join("v4_journal.bin")).expect("run with FLUXIO_BLESS=1");
    let latest = Checkpoint::from_bytes(&journal().key(), &stored).expect("decodes");
    let all = latest.clone().into_journal();
    assert_eq!(all.len(), 4);
    assert_eq!(all.iter().map(|c| c.seq).collect::<Vec<_>>(), [0, 1, 2, 3]);
    let parts: Vec<Vec<u8>> = all
        .iter()
        .map(|c| c.entry_bytes().expect("encodes alone"))
        .collect();
    assert_eq!(
        parts[0],
        std::fs::read(dir().join("v4_running.bin")).expect("read")
    );
    let whole = |c: &Checkpoint| {
        let mut c = c.clone();
        c.change = Change::Full;
        c.entry_bytes().expect("encodes").len()
    };
    let sizes = [
        parts[1].len(),
        whole(&all[1]),
        parts[2].len(),
        whole(&all[2]),
    ];
    assert!(
        sizes[0] < sizes[1] && sizes[2] * 2 < sizes[3],
        "deltas write less than whole checkpoints (no context, no structure): {sizes:?}"
    );
    let back = Checkpoint::from_entries(&latest.key(), &parts).expect("folds");
    assert_eq!(back, latest);
    assert_eq!(back.context.get("tier").as_deref(), Some(&string("gold")));
    assert_eq!(back.context.get("name"), None, "removed");
    assert!(
        Checkpoint::from_entries(&latest.key(), &parts[1..]).is_err(),
        "a delta without its base is refused"
    );
    let journal =
        Checkpoint::journal_from_entries(&latest.key(), &parts).expect("the whole journal");
    assert_eq!(journal, all);
}

#[test]
fn golden_values_survive_exactly() {
    if bless() {
        return;
    }
    let stored = std::fs::read(dir().join("v1_completed_every_value.bin"))
        .expect("run with FLUXIO_BLESS=1 to write the fixtures");
    let cp = Checkpoint::from_bytes(RUN_ID, &stored).expect("decodes");
    let ctx = cp.context.to_context();
    assert_eq!(ctx.get::<u64>("u64_max").expect("u64"), u64::MAX);
    assert_eq!(ctx.get::<i64>("i64_min").expect("i64"), i64::MIN);
    assert_eq!(ctx.get::<u128>("u128_max").expect("u128"), u128::MAX);
    assert!(ctx.get::<f64>("nan").expect("nan").is_nan());
    assert!(
        matches!(ctx.value("nan_payload").as_deref(), Some(Value::F64(f)) if f.to_bits() == 0xfff4_0000_dead_beef)
    );
    assert!(ctx.get::<f64>("neg_zero").expect("-0").is_sign_negative());
    assert!(
        matches!(ctx.value("bytes").as_deref(), Some(Value::Bytes(b)) if b == &[0, 1, 127, 128, 254, 255, 0])
    );
    assert_eq!(ctx.get::<char>("char").expect("char"), '🦀');
    assert_eq!(
        ctx.get::<String>("ключ 🔑 :/ space").expect("unicode key"),
        "unicode key"
    );
    assert_eq!(cp.updated_at_ms, u64::MAX);
    assert_eq!(cp.attempt, u32::MAX);
}

#[test]
fn golden_v3_packed_values_read_back_as_their_types() {
    if bless() {
        return;
    }
    let stored = std::fs::read(dir().join("v3_completed_every_value.bin"))
        .expect("run with FLUXIO_BLESS=1 to write the fixtures");
    let cp = Checkpoint::from_bytes("orders/golden:run/ü 🦀", &stored).expect("decodes");
    let ctx = cp.context.to_context();
    assert_eq!(
        ctx.get::<Vec<u8>>("packed_u8").expect("u8s"),
        [0, 1, 127, 128, 255]
    );
    assert_eq!(
        ctx.get::<Vec<i16>>("packed_i16").expect("i16s"),
        [i16::MIN, -1, i16::MAX]
    );
    let f32s = ctx.get::<Vec<f32>>("packed_f32").expect("f32s");
    let bits: Vec<u32> = f32s.iter().map(|x| x.to_bits()).collect();
    assert_eq!(
        bits,
        [
            0.1f32.to_bits(),
            (-0.0f32).to_bits(),
            f32::NAN.to_bits(),
            0x7fc0_dead,
            f32::INFINITY.to_bits()
        ]
    );
    assert_eq!(
        ctx.get::<Vec<bool>>("packed_bool").expect("bools"),
        [true, false, true]
    );
    assert_eq!(
        ctx.get::<Vec<u64>>("packed_u64").expect("u64s"),
        [u64::MAX, 0]
    );
    // Readable without the types, as a `Value`.
    assert_eq!(
        ctx.value("packed_u8").map(|v| v.to_string()).as_deref(),
        Some("[0, 1, 127, 128, 255]")
    );
}

#[test]
fn golden_files_are_typed_errors_under_another_run_id() {
    if bless() {
        return;
    }
    for (name, _, _) in goldens() {
        let stored = std::fs::read(dir().join(name)).expect("fixture exists");
        match Checkpoint::from_bytes("another-run", &stored) {
            Err(Error::CorruptCheckpoint { run_id, reason, .. }) => {
                assert_eq!(run_id, "another-run", "{name}");
                assert!(reason.contains(RUN_ID), "{name}: {reason}");
            }
            other => panic!("{name}: expected CorruptCheckpoint, got {other:?}"),
        }
    }
}

#[test]
fn every_fixture_file_is_checked() {
    if bless() {
        return;
    }
    assert!(
        goldens()
            .iter()
            .any(|(_, format, _)| *format == FORMAT_VERSION),
        "the newest format, {FORMAT_VERSION}, has golden files"
    );
    let known: Vec<&str> = goldens().into_iter().map(|(name, _, _)| name).collect();
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir()).expect("the fixtures folder exists") {
        let name = entry.expect("dir entry").file_name();
        let name = name.to_string_lossy().into_owned();
        if name.ends_with(".bin") {
            found.push(name);
        }
    }
    found.sort();
    for name in &found {
        assert!(
            known.contains(&name.as_str()),
            "{name} is in tests/fixtures/checkpoints but not checked by this test"
        );
    }
    assert_eq!(found.len(), known.len(), "fixture files missing: {found:?}");
}
