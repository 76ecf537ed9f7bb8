//! Bad bytes: `Checkpoint::from_bytes` on a million mutated payloads.
//!
//! Valid encodings of format 3 (small, every `Value` variant nested, packed
//! sequences of several element types, a large context,
//! unicode everywhere, failed and cancelled runs, nesting close to
//! `MAX_DEPTH`) are mutated
//! (truncated, bit-flipped, overwritten with interesting bytes, grown,
//! shrunk, spliced, their length prefixes set to huge values, their tags
//! confused) and, for most mutants, the header's CRC and length are
//! recomputed so that the mutant reaches the bincode decoder instead of
//! stopping at the checksum. Every result must be `Ok` (and re-encode to the
//! same bytes, or at least to bytes that decode to the same checkpoint) or a
//! `CorruptCheckpoint` naming the run id it was loaded under; a panic or any
//! other error fails the test.
//!
//! Allocations: on Linux the fuzz loop and the huge-length sweep run in a
//! child process (this test binary again) under `ulimit -v`, so decoding a
//! mutant that claims a 1 GiB string must not try to allocate it: such an
//! allocation fails and aborts the child, which fails the test.
//!
//! Environment: `FLUXIO_FUZZ_SEED` (decimal or `0x` hex; random by default,
//! always printed), `FLUXIO_FUZZ_ITERATIONS` (default 1,000,000),
//! `FLUXIO_FUZZ_ONLY` (replay one iteration of the seed), `FLUXIO_FUZZ_THREADS`,
//! `FLUXIO_FUZZ_AS_LIMIT_MB` (the child's address-space limit, default 256;
//! the child runs with `MALLOC_ARENA_MAX=1` so that glibc's per-thread arenas
//! do not reserve address space; it needs well under 64 MiB; `0` runs
//! everything in-process without a limit).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once, PoisonError};
use std::time::Instant;

use fluxio_core::store::conformance::{self, Harness};
use fluxio_core::store::{
    BranchRecord, Change, Checkpoint, CheckpointStore, FORMAT_VERSION, MAGIC, MAX_PAYLOAD,
    OLDEST_FORMAT_VERSION,
};
use fluxio_core::value::Packed;
use fluxio_core::{Context, Error, RunStatus, StageCode, Structure, Value};

const HEADER: usize = 18;
const DEFAULT_ITERATIONS: u64 = 1_000_000;
const CHILD_ENV: &str = "FLUXIO_FUZZ_CHILD";
const DEFAULT_AS_LIMIT_MB: u64 = 256;

// ---- a tiny seeded RNG --------------------------------------------------------

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// xorshift64*; every iteration gets its own, derived from the seed and the
/// iteration number, so a failure replays without the others.
struct Rng(u64);

impl Rng {
    fn new(seed: u64, iteration: u64) -> Self {
        Rng(splitmix(seed ^ splitmix(iteration)) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n` (`n > 0`).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// `true` with probability `num / den`.
    fn chance(&mut self, num: u64, den: u64) -> bool {
        self.next() % den < num
    }

    fn byte(&mut self) -> u8 {
        self.next() as u8
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

// ---- the format's pieces, rebuilt independently ----------------------------------

static CRC_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 == 1 {
                0xedb8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
};

/// CRC-32 (IEEE), as in the header.
fn crc32(bytes: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in bytes {
        c = CRC_TABLE[((c ^ u32::from(b)) & 0xff) as usize] ^ (c >> 8);
    }
    !c
}

/// A header for `payload` that says `format`, with the right CRC (from
/// format 3 on, of the version's two bytes and the payload) and length.
fn frame(format: u16, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + payload.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&format.to_le_bytes());
    let crc = if format >= 3 {
        crc32(&[&format.to_le_bytes()[..], payload].concat())
    } else {
        crc32(payload)
    };
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// bincode 2's `standard()` varint of an unsigned integer.
fn varint(v: u64, out: &mut Vec<u8>) {
    if v < 251 {
        out.push(v as u8);
    } else if v <= u64::from(u16::MAX) {
        out.push(251);
        out.extend_from_slice(&(v as u16).to_le_bytes());
    } else if v <= u64::from(u32::MAX) {
        out.push(252);
        out.extend_from_slice(&(v as u32).to_le_bytes());
    } else {
        out.push(253);
        out.extend_from_slice(&v.to_le_bytes());
    }
}

/// Where the length prefixes and the one-byte tags of a valid payload are,
/// found by walking it (the targets of the structure-aware mutations).
#[derive(Default)]
struct Layout {
    /// `start..end` of every length prefix (strings, bytes, seqs, maps, the context).
    lengths: Vec<(usize, usize)>,
    /// Every `Value` tag, the status and the option tags.
    tags: Vec<usize>,
}

struct Walker<'a> {
    p: &'a [u8],
    pos: usize,
    layout: Layout,
}

impl Walker<'_> {
    fn byte(&mut self) -> u8 {
        let b = self.p[self.pos];
        self.pos += 1;
        b
    }

    fn varint(&mut self) -> u64 {
        match self.byte() {
            251 => {
                let v = u16::from_le_bytes([self.p[self.pos], self.p[self.pos + 1]]);
                self.pos += 2;
                u64::from(v)
            }
            252 => {
                let mut b = [0u8; 4];
                b.copy_from_slice(&self.p[self.pos..self.pos + 4]);
                self.pos += 4;
                u64::from(u32::from_le_bytes(b))
            }
            253 => {
                let mut b = [0u8; 8];
                b.copy_from_slice(&self.p[self.pos..self.pos + 8]);
                self.pos += 8;
                u64::from_le_bytes(b)
            }
            254 => {
                self.pos += 16;
                0
            }
            b => u64::from(b),
        }
    }

    fn length(&mut self) -> usize {
        let start = self.pos;
        let n = self.varint();
        self.layout.lengths.push((start, self.pos));
        usize::try_from(n).expect("a valid payload")
    }

    fn string(&mut self) {
        let n = self.length();
        self.pos += n;
    }

    fn tag(&mut self) -> u8 {
        self.layout.tags.push(self.pos);
        self.byte()
    }

    fn value(&mut self) {
        match self.tag() {
            0 | 10 => {}
            1 => self.pos += 1,
            2..=5 => {
                self.varint();
            }
            6 => self.pos += 8,
            7 => {
                let first = self.byte();
                self.pos += match first {
                    0..=0x7f => 0,
                    0xc0..=0xdf => 1,
                    0xe0..=0xef => 2,
                    _ => 3,
                };
            }
            8 | 9 => self.string(),
            11 => self.value(),
            12 => {
                for _ in 0..self.length() {
                    self.value();
                }
            }
            13 => {
                for _ in 0..self.length() {
                    self.value();
                    self.value();
                }
            }
            14 => {
                self.string();
                self.value();
            }
            // packed sequences: a count, then fixed-width elements
            15..=25 => {
                let width =
                    [1, 1, 2, 2, 4, 4, 8, 8, 4, 8, 1][usize::from(self.p[self.pos - 1] - 15)];
                let n = self.length();
                self.pos += n * width;
            }
            other => panic!("unknown tag {other} in a valid payload"),
        }
    }

    fn context(&mut self) {
        for _ in 0..self.length() {
            self.string();
            self.value();
        }
    }

    /// A format 4 payload: the number of checkpoints, then each.
    fn checkpoint(p: &[u8]) -> Layout {
        let mut w = Walker {
            p,
            pos: 0,
            layout: Layout::default(),
        };
        for _ in 0..w.length() {
            w.entry();
        }
        assert_eq!(w.pos, p.len(), "the walker read the whole payload");
        w.layout
    }

    fn entry(&mut self) {
        self.string(); // pipeline
        self.string(); // run_id
        self.string(); // version
        self.varint(); // seq
        self.varint(); // keep_from
        self.varint(); // ip
        self.string(); // step
        self.tag(); // status
        if self.tag() == 1 {
            self.string(); // error_message
        }
        self.varint(); // created_at_ms
        self.varint(); // updated_at_ms
        self.varint(); // attempt
        if self.tag() == 1 {
            self.string(); // the structure's shape
            for _ in 0..self.length() {
                self.string(); // a stage's name
                self.pos += 32; // and its hash
            }
        }
        for _ in 0..self.length() {
            // a branch record: index, name, the written keys and values (as
            // the context's), the removed keys
            self.varint();
            self.string();
            self.context();
            for _ in 0..self.length() {
                self.string();
            }
        }
        // the change: the whole context, or the written keys and the removed ones
        if self.tag() == 0 {
            self.context();
        } else {
            self.context();
            for _ in 0..self.length() {
                self.string();
            }
        }
    }
}

// ---- seeds ----------------------------------------------------------------------

struct Seed {
    name: &'static str,
    run_id: String,
    payload: Vec<u8>,
    layout: Layout,
}

fn checkpoint(run_id: &str, ctx: Context) -> Checkpoint {
    let mut cp = Checkpoint::new(run_id, "0123456789abcdef", 5, "charge", ctx.snapshot());
    cp.structure = Some(Arc::new(Structure::new(
        "[validate, charge, parallel[[email], [sms]]]",
        vec![
            StageCode::new("validate", [7; 32]),
            StageCode::new("charge", [0xfe; 32]),
        ],
    )));
    cp.created_at_ms = 1_700_000_000_000;
    cp.updated_at_ms = 1_700_000_000_999;
    cp.attempt = 2;
    cp
}

fn s(v: &str) -> Value {
    Value::String(v.to_owned())
}

fn every_variant() -> Vec<Value> {
    vec![
        Value::Unit,
        Value::Bool(true),
        Value::I64(i64::MIN),
        Value::U64(u64::MAX),
        Value::I128(i128::MIN),
        Value::U128(u128::MAX),
        Value::F64(f64::NAN),
        Value::F64(-0.0),
        Value::Char('🦀'),
        s("ü"),
        Value::Bytes(vec![0, 0x7f, 0x80, 0xff]),
        Value::None,
        Value::Some(Box::new(Value::U64(300))),
        Value::Seq(vec![Value::I64(-70_000), Value::U64(70_000)]),
        Value::Map([(Value::U64(1), s("one")), (s("k"), Value::Unit)].into()),
        Value::Enum {
            variant: "Paid".to_owned(),
            value: Box::new(Value::Map([(s("seats"), Value::U64(3))].into())),
        },
        Value::Packed(Packed::U8(vec![0, 1, 0xfa, 0xff])),
        Value::Packed(Packed::I16(vec![-1, 300])),
        Value::Packed(Packed::F32(vec![0.5, f32::NAN])),
        Value::Packed(Packed::U64(vec![u64::MAX])),
        Value::Packed(Packed::Bool(vec![true, false])),
    ]
}

fn nested_every_variant() -> Value {
    let flat = every_variant();
    let map = flat
        .iter()
        .enumerate()
        .map(|(i, v)| (Value::U64(i as u64), v.clone()))
        .collect();
    Value::Enum {
        variant: "Nested".to_owned(),
        value: Box::new(Value::Some(Box::new(Value::Seq(vec![
            Value::Map(map),
            Value::Seq(flat),
            Value::Some(Box::new(Value::Some(Box::new(Value::None)))),
        ])))),
    }
}

fn deep(depth: usize) -> Value {
    let mut v = Value::U64(1);
    for i in 0..depth {
        v = match i % 4 {
            0 => Value::Some(Box::new(v)),
            1 => Value::Seq(vec![v]),
            2 => Value::Map([(Value::Unit, v)].into()),
            _ => Value::Enum {
                variant: "E".to_owned(),
                value: Box::new(v),
            },
        };
    }
    v
}

fn seeds() -> Vec<Seed> {
    let small = checkpoint("run-1", [("n", Value::U64(1))].into_iter().collect());
    let every = checkpoint(
        "every:variant",
        every_variant()
            .into_iter()
            .enumerate()
            .map(|(i, v)| (format!("k{i}"), v))
            .chain([("nested".to_owned(), nested_every_variant())])
            .collect(),
    );
    let large = checkpoint(
        "large",
        (0..200u64)
            .map(|i| {
                let v = match i % 5 {
                    0 => Value::U64(i * 1_000_003),
                    1 => s(&"x".repeat(i as usize)),
                    2 => Value::Seq((0..i % 13).map(Value::U64).collect()),
                    3 => Value::F64(i as f64 / 7.0),
                    _ => Value::Bytes((0..i as u8).collect()),
                };
                (format!("key-{i:04}"), v)
            })
            .chain([
                ("blob".to_owned(), Value::Bytes(vec![0xab; 4096])),
                (
                    "packed".to_owned(),
                    Value::Packed(Packed::U8((0..=255).cycle().take(4096).collect())),
                ),
                (
                    "floats".to_owned(),
                    Value::Packed(Packed::F32((0..512).map(|i| i as f32 / 3.0).collect())),
                ),
            ])
            .collect(),
    );
    let mut unicode = checkpoint(
        "ユニコード 🦀:/ü",
        [
            ("ключ 🔑", s("значение")),
            ("東京", Value::Char('京')),
            (
                "emoji",
                s("👩\u{200d}👩\u{200d}👧 \u{200b} \u{feff} e\u{301}"),
            ),
        ]
        .into_iter()
        .collect(),
    );
    unicode.version = "versión-ß".to_owned();
    unicode.step = "étape 🚀".to_owned();
    let mut failed = checkpoint(
        "failed-run",
        [("attempts", Value::Seq(vec![Value::U64(1), Value::U64(2)]))]
            .into_iter()
            .collect(),
    );
    failed.status = RunStatus::Failed;
    failed.error_message = Some("stage `charge` failed: card declined 💳".to_owned());
    failed.attempt = 3;
    // status 3, format 2's newest value: a mutated status byte lands on it
    // and past it (4 and up must be refused)
    let mut cancelled = failed.clone();
    cancelled.run_id = "cancelled-run".to_owned();
    cancelled.status = RunStatus::Cancelled;
    // format 3: two finished branches of a parallel block, with writes,
    // a removal and nested values
    let mut in_block = failed.clone();
    in_block.run_id = "in-block".to_owned();
    let base = in_block.context.to_context().clear_written();
    let email = base
        .fork("email")
        .set_value("sent", nested_every_variant())
        .remove("attempts");
    let sms = base.fork("sms").set_value("sms", s("ok ✉"));
    in_block.branches = vec![
        BranchRecord::of(0, "email", &email),
        BranchRecord::of(2, "sms", &sms),
    ];
    let mut completed = checkpoint(
        "done",
        [("deep", deep(120)), ("result", Value::Bool(true))]
            .into_iter()
            .collect(),
    );
    completed.status = RunStatus::Completed;
    completed.step = String::new();
    completed.updated_at_ms = u64::MAX;
    completed.attempt = u32::MAX;
    let empty = {
        let mut cp = Checkpoint::new("", "", 0, "", Context::new().snapshot());
        cp.created_at_ms = 0;
        cp.updated_at_ms = 0;
        cp.attempt = 0;
        cp
    };
    // format 4: a journal of four checkpoints in one blob, three of them
    // deltas (a key written, one changed, one removed; a failure; a cancel)
    let journal = {
        let mut base = checkpoint(
            "journal",
            [("n", Value::U64(1)), ("gone", s("x"))]
                .into_iter()
                .collect(),
        );
        base.keep_from = 0;
        let mut next = base.clone();
        next.context = base
            .context
            .to_context()
            .set_value("n", Value::U64(2))
            .set_value("nested", nested_every_variant())
            .remove("gone")
            .snapshot();
        next.change = Change::between(&base.context, &next.context);
        (next.seq, next.ip) = (1, 9);
        let mut failed = next.clone().failed("stage `charge` failed");
        (failed.seq, failed.change) = (2, Change::none());
        let mut cancelled = failed.clone().cancelled();
        (cancelled.seq, cancelled.change, cancelled.keep_from) = (3, Change::none(), 1);
        cancelled.earlier = vec![base, next, failed];
        cancelled
    };
    [
        ("journal", journal),
        ("small", small),
        ("every_variant", every),
        ("large", large),
        ("unicode", unicode),
        ("failed", failed),
        ("cancelled", cancelled),
        ("in_block", in_block),
        ("deep", completed),
        ("empty", empty),
    ]
    .into_iter()
    .map(|(name, cp)| {
        let bytes = cp.to_bytes().expect("a seed encodes");
        let back = Checkpoint::from_bytes(&cp.run_id, &bytes).expect("a seed decodes");
        assert_eq!(back, cp, "seed {name} round-trips");
        assert_eq!(
            back.earlier, cp.earlier,
            "seed {name} round-trips its journal"
        );
        let payload = bytes[HEADER..].to_vec();
        let layout = Walker::checkpoint(&payload);
        Seed {
            name,
            run_id: cp.run_id,
            payload,
            layout,
        }
    })
    .collect()
}

// ---- mutations ------------------------------------------------------------------

/// Appends to the description of a mutant, when one is wanted (only to
/// report a failure: formatting every mutant would dominate the run time).
macro_rules! note {
    ($what:expr, $($arg:tt)*) => {
        if let Some(w) = $what.as_mut() {
            use std::fmt::Write as _;
            let _ = write!(w, $($arg)*);
        }
    };
}

const INTERESTING: [u8; 14] = [
    0x00, 0x01, 0x02, 0x0e, 0x0f, 0x7f, 0x80, 0xfa, 0xfb, 0xfc, 0xfd, 0xfe, 0xff, 0x10,
];

/// A length claim: often just below the decoder's limit, or far beyond the input.
fn huge(rng: &mut Rng, remaining: usize) -> u64 {
    let limit = MAX_PAYLOAD as u64;
    let choices = [
        limit - 1,
        limit - 64,
        limit,
        limit + 1,
        limit / 2,
        limit / 3,
        u64::from(u32::MAX),
        u64::from(u32::MAX) - 1,
        1 << 31,
        1 << 40,
        u64::MAX,
        u64::MAX / 2,
        rng.next(),
        rng.next() >> 34, // up to 1 GiB
        u64::from(rng.next() as u32),
        remaining as u64 + 1,
        remaining as u64 + 1 + (rng.next() % 1_000),
        usize::MAX as u64 / 40 + 1,
    ];
    *rng.pick(&choices)
}

fn huge_varint(rng: &mut Rng, remaining: usize) -> Vec<u8> {
    let v = huge(rng, remaining);
    let mut out = Vec::with_capacity(9);
    if rng.chance(1, 4) {
        // Not the shortest encoding: bincode may or may not accept it.
        out.push(253);
        out.extend_from_slice(&v.to_le_bytes());
    } else {
        varint(v, &mut out);
    }
    out
}

/// Mutates `p` in place; `what` collects a description for failure reports.
fn mutate(rng: &mut Rng, seed: &Seed, seeds: &[Seed], p: &mut Vec<u8>, what: &mut Option<String>) {
    // Structure-aware first, while the seed's layout still applies.
    if rng.chance(2, 5) {
        if rng.chance(3, 5) && !seed.layout.lengths.is_empty() {
            let (start, end) = *rng.pick(&seed.layout.lengths);
            let claim = huge_varint(rng, p.len() - end);
            note!(what, "length@{start}={claim:02x?} ");
            p.splice(start..end, claim);
        } else if !seed.layout.tags.is_empty() {
            let at = *rng.pick(&seed.layout.tags);
            let b = if rng.chance(1, 2) {
                rng.below(28) as u8
            } else {
                rng.byte()
            };
            note!(what, "tag@{at}={b} ");
            p[at] = b;
        }
        if rng.chance(1, 2) {
            return;
        }
    }
    let max_ops = if rng.chance(1, 8) { 8 } else { 3 };
    let ops = 1 + rng.below(max_ops);
    for _ in 0..ops {
        let len = p.len();
        match rng.below(11) {
            0 => {
                let at = rng.below(len + 1);
                note!(what, "truncate@{at} ");
                p.truncate(at);
            }
            1 if len > 0 => {
                let at = rng.below(len);
                let bit = rng.below(8);
                note!(what, "flip@{at}.{bit} ");
                p[at] ^= 1 << bit;
            }
            2 | 3 if len > 0 => {
                let at = rng.below(len);
                let b = *rng.pick(&INTERESTING);
                note!(what, "set@{at}={b:#04x} ");
                p[at] = b;
            }
            4 if len > 0 => {
                let at = rng.below(len);
                let b = rng.byte();
                note!(what, "set@{at}={b:#04x} ");
                p[at] = b;
            }
            5 => {
                let at = rng.below(len + 1);
                let n = 1 + rng.below(16);
                let bytes: Vec<u8> = (0..n)
                    .map(|_| {
                        if rng.chance(1, 2) {
                            *rng.pick(&INTERESTING)
                        } else {
                            rng.byte()
                        }
                    })
                    .collect();
                note!(what, "insert@{at}={bytes:02x?} ");
                p.splice(at..at, bytes);
            }
            6 if len > 0 => {
                let at = rng.below(len);
                let n = (1 + rng.below(16)).min(len - at);
                note!(what, "delete@{at}+{n} ");
                p.drain(at..at + n);
            }
            7 => {
                let other = &rng.pick(seeds).payload;
                let at = rng.below(len + 1);
                let from = rng.below(other.len() + 1);
                note!(what, "splice@{at}<-{from} ");
                p.truncate(at);
                p.extend_from_slice(&other[from..]);
            }
            8 if len > 0 => {
                let from = rng.below(len);
                let n = (1 + rng.below(32)).min(len - from);
                let at = rng.below(len + 1);
                let chunk = p[from..from + n].to_vec();
                note!(what, "dup@{from}+{n}->{at} ");
                p.splice(at..at, chunk);
            }
            9 => {
                let at = rng.below(len + 1);
                let claim = huge_varint(rng, len - at);
                note!(what, "claim@{at}={claim:02x?} ");
                if rng.chance(1, 2) {
                    let end = (at + claim.len()).min(len);
                    p.splice(at..end, claim);
                } else {
                    p.splice(at..at, claim);
                }
            }
            _ if len > 1 => {
                let (a, b) = (rng.below(len), rng.below(len));
                note!(what, "swap@{a},{b} ");
                p.swap(a, b);
            }
            _ => {}
        }
    }
}

/// A mutant of a random seed, framed: mostly with a correct header, sometimes
/// with another format version, a stale or mangled header.
/// Returns the seed's index, the bytes, whether the header is the right one
/// for the payload (so the payload reaches the bincode decoder), and the
/// other format version the header carries, if it does.
fn mutant(
    rng: &mut Rng,
    seeds: &[Seed],
    what: &mut Option<String>,
) -> (usize, Vec<u8>, bool, Option<u16>) {
    // The large seed is slow in a debug build: pick it less often.
    let index = loop {
        let i = rng.below(seeds.len());
        if seeds[i].name != "large" || rng.chance(1, 8) {
            break i;
        }
    };
    let seed = &seeds[index];
    note!(what, "seed {}: ", seed.name);
    let mut payload = seed.payload.clone();
    let mutate_payload = !rng.chance(1, 20);
    if mutate_payload {
        mutate(rng, seed, seeds, &mut payload, what);
    }
    let roll = rng.below(100);
    if roll < 85 {
        return (index, frame(FORMAT_VERSION, &payload), true, None);
    }
    if roll < 92 {
        let format = match rng.below(4) {
            0 => 0,
            1 => FORMAT_VERSION + 1,
            2 => u16::MAX,
            _ => rng.next() as u16,
        };
        // a format this build reads (format 1 over a format 2 payload, say)
        // must decode or fail typed, like any other payload
        if !(OLDEST_FORMAT_VERSION..=FORMAT_VERSION).contains(&format) {
            note!(what, "format {format} ");
            return (index, frame(format, &payload), false, Some(format));
        }
        return (index, frame(format, &payload), true, None);
    }
    // A header that does not fit: stale CRC, wrong length, mangled bytes.
    let mut bytes = frame(FORMAT_VERSION, &seed.payload);
    bytes.truncate(HEADER);
    bytes.extend_from_slice(&payload);
    match rng.below(4) {
        0 => {
            note!(what, "stale header ");
        }
        1 => {
            let len = huge(rng, payload.len());
            note!(what, "header length {len} ");
            bytes[10..18].copy_from_slice(&len.to_le_bytes());
        }
        2 => {
            let at = rng.below(HEADER);
            let b = rng.byte();
            note!(what, "header@{at}={b:#04x} ");
            bytes[at] = b;
        }
        _ => {
            let at = rng.below(bytes.len() + 1);
            note!(what, "raw truncate@{at} ");
            bytes.truncate(at);
        }
    }
    (index, bytes, false, None)
}

// ---- checking one decode ---------------------------------------------------------

#[derive(Default, Clone, Copy)]
struct Counts {
    total: u64,
    reached_decoder: u64,
    ok_identical: u64,
    ok_reencoded: u64,
    err_header: u64,
    err_format: u64,
    err_checksum: u64,
    err_payload: u64,
    err_run_id: u64,
    panics: u64,
    bad: u64,
}

impl Counts {
    fn add(&mut self, o: &Counts) {
        self.total += o.total;
        self.reached_decoder += o.reached_decoder;
        self.ok_identical += o.ok_identical;
        self.ok_reencoded += o.ok_reencoded;
        self.err_header += o.err_header;
        self.err_format += o.err_format;
        self.err_checksum += o.err_checksum;
        self.err_payload += o.err_payload;
        self.err_run_id += o.err_run_id;
        self.panics += o.panics;
        self.bad += o.bad;
    }
}

thread_local! {
    static QUIET: Cell<bool> = const { Cell::new(false) };
    static LAST_PANIC: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Panics on fuzz threads are recorded (and counted) instead of printed.
fn install_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if QUIET.with(Cell::get) {
                LAST_PANIC.with(|m| *m.borrow_mut() = info.to_string());
            } else {
                previous(info);
            }
        }));
    });
}

/// Decodes `bytes` under `run_id` and judges the result; `Err` describes a
/// violation.
fn check(
    run_id: &str,
    bytes: &[u8],
    framed: bool,
    other_format: Option<u16>,
    counts: &mut Counts,
) -> Result<(), String> {
    counts.total += 1;
    if framed {
        counts.reached_decoder += 1;
    }
    QUIET.with(|q| q.set(true));
    let result = catch_unwind(AssertUnwindSafe(|| Checkpoint::from_bytes(run_id, bytes)));
    QUIET.with(|q| q.set(false));
    let result = match result {
        Ok(r) => r,
        Err(_) => {
            counts.panics += 1;
            let message = LAST_PANIC.with(|m| std::mem::take(&mut *m.borrow_mut()));
            return Err(format!("PANIC: {message}"));
        }
    };
    counts.bad += 1; // taken back below when the result is fine
    match result {
        Ok(cp) => {
            if let Some(format) = other_format {
                return Err(format!("format {format} was accepted"));
            }
            if cp.run_id != run_id {
                return Err(format!("Ok for run `{}` under `{run_id}`", cp.run_id));
            }
            let again = cp
                .to_bytes()
                .map_err(|e| format!("decoded but does not re-encode: {e}"))?;
            if again == bytes {
                counts.ok_identical += 1;
            } else {
                match Checkpoint::from_bytes(run_id, &again) {
                    Ok(back) if back == cp => counts.ok_reencoded += 1,
                    other => {
                        return Err(format!(
                            "re-encoding changed the checkpoint: {cp:?} -> {other:?}"
                        ));
                    }
                }
            }
        }
        Err(Error::CorruptCheckpoint {
            run_id: r, reason, ..
        }) => {
            if r != run_id {
                return Err(format!("CorruptCheckpoint names `{r}`, not `{run_id}`"));
            }
            if let Some(format) = other_format {
                let says = |v: u16| reason.contains(&format!("format {v}"));
                if !says(format) || !says(FORMAT_VERSION) {
                    return Err(format!(
                        "format {format}: the reason does not name both versions: {reason}"
                    ));
                }
                counts.err_format += 1;
            } else if reason.contains("checksum") {
                counts.err_checksum += 1;
            } else if reason.contains("cannot decode") || reason.contains("trailing") {
                counts.err_payload += 1;
            } else if reason.contains("belongs to run") {
                counts.err_run_id += 1;
            } else if reason.contains("format") {
                counts.err_format += 1;
            } else {
                counts.err_header += 1;
            }
        }
        Err(other) => return Err(format!("not CorruptCheckpoint: {other:?}")),
    }
    counts.bad -= 1;
    Ok(())
}

// ---- running in a child under an address-space limit ------------------------------

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim().replace('_', "");
    let parsed = match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => v.parse(),
    };
    Some(parsed.unwrap_or_else(|e| panic!("{name}={v}: {e}")))
}

/// On Linux, runs test `name` of this binary again in a child process under
/// `ulimit -v`, echoes its output and fails when it fails (an allocation
/// beyond the limit aborts it). Returns `false` when the caller should run
/// the test in-process instead: in the child itself, off Linux, with
/// `FLUXIO_FUZZ_AS_LIMIT_MB=0`, or when no `sh` can set the limit.
fn ran_in_limited_child(name: &str) -> bool {
    if !cfg!(target_os = "linux") || std::env::var_os(CHILD_ENV).is_some() {
        return false;
    }
    let limit_mb = env_u64("FLUXIO_FUZZ_AS_LIMIT_MB").unwrap_or(DEFAULT_AS_LIMIT_MB);
    if limit_mb == 0 {
        return false;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let output = std::process::Command::new("sh")
        .arg("-c")
        .arg(r#"ulimit -v "$1" || exit 97; shift; exec "$@""#)
        .arg("sh")
        .arg((limit_mb * 1024).to_string())
        .arg(exe)
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "1")
        // glibc reserves 64 MiB of address space per thread arena; one arena
        // keeps the baseline small and the limit meaningful.
        .env("MALLOC_ARENA_MAX", "1")
        .output();
    let output = match output {
        Ok(o) if o.status.code() != Some(97) => o,
        other => {
            eprintln!("cannot run under `ulimit -v` ({other:?}); running in-process");
            return false;
        }
    };
    print!("{}", String::from_utf8_lossy(&output.stdout));
    eprint!("{}", String::from_utf8_lossy(&output.stderr));
    assert!(
        output.status.success(),
        "`{name}` failed in a child process limited to {limit_mb} MiB of address space \
         ({}); an abort there means an allocation far beyond the input's size",
        output.status
    );
    true
}

// ---- the tests ----------------------------------------------------------------------

#[test]
fn a_million_mutated_payloads_decode_or_fail_typed_without_panicking() {
    if ran_in_limited_child("a_million_mutated_payloads_decode_or_fail_typed_without_panicking") {
        return;
    }
    install_panic_hook();
    let seed = env_u64("FLUXIO_FUZZ_SEED").unwrap_or_else(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        splitmix(nanos ^ u64::from(std::process::id()))
    });
    let (first, end) = match env_u64("FLUXIO_FUZZ_ONLY") {
        Some(i) => (i, i + 1),
        None => (
            0,
            env_u64("FLUXIO_FUZZ_ITERATIONS").unwrap_or(DEFAULT_ITERATIONS),
        ),
    };
    let threads = env_u64("FLUXIO_FUZZ_THREADS").map_or_else(
        || std::thread::available_parallelism().map_or(2, |n| n.get().min(4)),
        |n| n.max(1) as usize,
    );
    println!("decode_fuzz: seed={seed:#018x} iterations={first}..{end} threads={threads}");
    let seeds = Arc::new(seeds());
    let next = Arc::new(AtomicU64::new(first));
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let started = Instant::now();
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let (seeds, next, failures) = (seeds.clone(), next.clone(), failures.clone());
            std::thread::spawn(move || {
                let mut counts = Counts::default();
                loop {
                    let batch = next.fetch_add(1_000, Ordering::Relaxed);
                    if batch >= end {
                        return counts;
                    }
                    for i in batch..(batch + 1_000).min(end) {
                        let mut rng = Rng::new(seed, i);
                        let (index, bytes, framed, format) = mutant(&mut rng, &seeds, &mut None);
                        let run_id = &seeds[index].run_id;
                        if let Err(problem) = check(run_id, &bytes, framed, format, &mut counts) {
                            let mut f = failures.lock().unwrap_or_else(PoisonError::into_inner);
                            if f.len() < 20 {
                                // The same mutant again, described this time.
                                let mut what = Some(String::new());
                                mutant(&mut Rng::new(seed, i), &seeds, &mut what);
                                let what = what.unwrap_or_default();
                                let shown = &bytes[..bytes.len().min(96)];
                                f.push(format!(
                                    "iteration {i} ({what}): {problem}\n    {} bytes: {shown:02x?}",
                                    bytes.len()
                                ));
                            }
                        }
                    }
                }
            })
        })
        .collect();
    let mut counts = Counts::default();
    for w in workers {
        counts.add(&w.join().expect("a fuzz worker"));
    }
    let elapsed = started.elapsed();
    let ok = counts.ok_identical + counts.ok_reencoded;
    let errs = counts.err_header
        + counts.err_format
        + counts.err_checksum
        + counts.err_payload
        + counts.err_run_id;
    println!(
        "decode_fuzz result: seed={seed:#018x} mutants={} valid_header={} ok={ok} \
         (identical {}, re-encoded {}) corrupt={errs} (header {}, format {}, checksum {}, \
         payload {}, run id {}) panics={} bad={} in {:.1}s ({threads} threads)",
        counts.total,
        counts.reached_decoder,
        counts.ok_identical,
        counts.ok_reencoded,
        counts.err_header,
        counts.err_format,
        counts.err_checksum,
        counts.err_payload,
        counts.err_run_id,
        counts.panics,
        counts.bad,
        elapsed.as_secs_f64()
    );
    let failures = failures.lock().unwrap_or_else(PoisonError::into_inner);
    assert!(
        counts.panics == 0 && counts.bad == 0,
        "{} panics and {} bad results with FLUXIO_FUZZ_SEED={seed:#x} \
         (replay one with FLUXIO_FUZZ_ONLY=<iteration>):\n{}",
        counts.panics,
        counts.bad,
        failures.join("\n")
    );
    assert_eq!(counts.total, end - first);
    if end - first >= 100_000 {
        assert!(
            counts.reached_decoder * 2 > counts.total,
            "most mutants must reach the payload decoder"
        );
        assert!(
            counts.err_payload > 0 && ok > 0,
            "the decoder saw both kinds"
        );
    }
}

/// Every length prefix of every seed, set to every huge claim: an error, no
/// panic, and (in the limited child) no allocation of the claimed size.
#[test]
fn huge_claimed_lengths_are_errors_and_are_not_allocated() {
    if ran_in_limited_child("huge_claimed_lengths_are_errors_and_are_not_allocated") {
        return;
    }
    install_panic_hook();
    let limit = MAX_PAYLOAD as u64;
    let claims = [
        limit - 1,
        limit - 64,
        limit,
        limit / 2,
        u64::from(u32::MAX),
        1 << 31,
        u64::MAX,
        usize::MAX as u64 / 40 + 1,
    ];
    let mut counts = Counts::default();
    let mut failures = Vec::new();
    for seed in &seeds() {
        for &(start, end) in &seed.layout.lengths {
            for &claim in &claims {
                let mut payload = seed.payload.clone();
                let mut prefix = Vec::new();
                varint(claim, &mut prefix);
                payload.splice(start..end, prefix);
                let bytes = frame(FORMAT_VERSION, &payload);
                let before = counts.err_payload;
                if let Err(problem) = check(&seed.run_id, &bytes, true, None, &mut counts) {
                    failures.push(format!("{} length@{start}={claim}: {problem}", seed.name));
                } else if counts.err_payload == before {
                    failures.push(format!(
                        "{} length@{start}={claim}: accepted a length beyond the input",
                        seed.name
                    ));
                }
            }
        }
    }
    println!(
        "huge claims: {} mutants, {} payload errors",
        counts.total, counts.err_payload
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(counts.total > 500, "the sweep covered the seeds");
}

#[test]
fn other_format_versions_name_both_versions() {
    let seeds = seeds();
    let seed = &seeds[0];
    for format in [0, FORMAT_VERSION + 1, FORMAT_VERSION + 2, 0x100, u16::MAX] {
        for bytes in [
            frame(format, &seed.payload),
            frame(format, b"garbage of a future format"),
            frame(format, &[]),
            frame(format, &seed.payload)[..6].to_vec(),
        ] {
            match Checkpoint::from_bytes(&seed.run_id, &bytes) {
                Err(Error::CorruptCheckpoint { run_id, reason, .. }) => {
                    assert_eq!(run_id, seed.run_id);
                    assert!(
                        reason.contains(&format!("format {format}"))
                            && reason.contains(&format!("format {FORMAT_VERSION}")),
                        "{format}: {reason}"
                    );
                }
                other => panic!("format {format}: expected CorruptCheckpoint, got {other:?}"),
            }
        }
    }
}

#[test]
fn valid_header_over_garbage_is_a_typed_error() {
    for garbage in [
        &b""[..],
        b"\x00",
        b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff",
        b"{\"run_id\": \"run-1\"}",
        &[0xfd; 64],
        &[
            0x05, b'r', b'u', b'n', b'-', b'1', 0xfc, 0xff, 0xff, 0xff, 0x3f,
        ],
    ] {
        match Checkpoint::from_bytes("run-1", &frame(FORMAT_VERSION, garbage)) {
            Err(Error::CorruptCheckpoint { run_id, .. }) => assert_eq!(run_id, "run-1"),
            other => panic!("{garbage:02x?}: expected CorruptCheckpoint, got {other:?}"),
        }
    }
}

#[test]
fn the_walker_agrees_with_the_encoder() {
    // The structure-aware mutations are only as good as the layout they use.
    for seed in seeds() {
        assert!(!seed.layout.lengths.is_empty(), "{}", seed.name);
        assert_eq!(
            seed.layout.lengths[0],
            (0, 1),
            "{}: the number of checkpoints comes first",
            seed.name
        );
        assert_eq!(
            seed.layout.lengths[1],
            (1, 2),
            "{}: then the pipeline name's length",
            seed.name
        );
        assert_eq!(seed.payload[1], 0, "{}: the seeds are unnamed", seed.name);
        let mut expected = Vec::new();
        varint(seed.run_id.len() as u64, &mut expected);
        assert_eq!(
            seed.layout.lengths[2],
            (2, 2 + expected.len()),
            "{}: then the run id's",
            seed.name
        );
        assert_eq!(
            seed.payload[2..2 + expected.len()],
            expected[..],
            "{}",
            seed.name
        );
    }
}

#[test]
fn values_nested_to_max_depth_decode_on_a_small_stack() {
    // Tokio's worker threads (where stores decode) have 2 MiB stacks; the
    // deepest value this build accepts must decode in half that, even in a
    // debug build. One level deeper is a typed error.
    let stack_kib = std::env::var("FLUXIO_FUZZ_STACK_KIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    std::thread::Builder::new()
        .stack_size(stack_kib * 1024)
        .spawn(|| {
            let max = fluxio_core::value::MAX_DEPTH;
            let ok = checkpoint("deep", [("v", deep(max))].into_iter().collect());
            let bytes = ok.to_bytes().expect("MAX_DEPTH encodes");
            assert_eq!(Checkpoint::from_bytes("deep", &bytes).expect("decodes"), ok);
            // Hand-made one level deeper (the encoder refuses it).
            let mut payload = bytes[HEADER..].to_vec();
            // the key "v" (its length 1, then `v`) is the context's last; its value follows
            let key = payload
                .windows(2)
                .rposition(|w| w == [1, b'v'])
                .expect("the key is there");
            Walker::checkpoint(&payload);
            let at = key + 2;
            payload.insert(at, 11); // one more `Some`
            match Checkpoint::from_bytes("deep", &frame(FORMAT_VERSION, &payload)) {
                Err(Error::CorruptCheckpoint { reason, .. }) => {
                    assert!(reason.contains("MAX_DEPTH"), "{reason}");
                }
                other => panic!("expected CorruptCheckpoint, got {other:?}"),
            }
        })
        .expect("spawn")
        .join()
        .expect("no stack overflow");
}

// ---- the conformance check on a byte-oriented store -----------------------------

/// The smallest store that persists `to_bytes()`, with raw writes for the
/// corrupt-payload conformance check.
#[derive(Debug, Default)]
struct ByteStore(Mutex<HashMap<String, Vec<u8>>>);

#[async_trait::async_trait]
impl CheckpointStore for ByteStore {
    async fn save(&self, checkpoint: Checkpoint) -> fluxio_core::Result<()> {
        let bytes = checkpoint.to_bytes()?;
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        map.insert(checkpoint.run_id, bytes);
        Ok(())
    }
    async fn load(&self, run_id: &str) -> fluxio_core::Result<Option<Checkpoint>> {
        let map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        map.get(run_id)
            .map(|b| Checkpoint::from_bytes(run_id, b))
            .transpose()
    }
    async fn delete(&self, run_id: &str) -> fluxio_core::Result<()> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(run_id);
        Ok(())
    }
    async fn exists(&self, run_id: &str) -> fluxio_core::Result<bool> {
        let map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(map.contains_key(run_id))
    }
}

#[derive(Debug, Default)]
struct ByteHarness(Mutex<HashMap<String, Arc<ByteStore>>>);

impl ByteHarness {
    fn get(&self, ns: &str) -> Arc<ByteStore> {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        map.entry(ns.to_owned()).or_default().clone()
    }
}

#[async_trait::async_trait]
impl Harness for ByteHarness {
    type Store = Arc<ByteStore>;

    async fn store(&self, ns: &str) -> Self::Store {
        self.get(ns)
    }

    async fn write_raw(&self, ns: &str, run_id: &str, bytes: &[u8]) -> bool {
        let store = self.get(ns);
        let mut map = store.0.lock().unwrap_or_else(PoisonError::into_inner);
        map.insert(run_id.to_owned(), bytes.to_vec());
        true
    }
}

#[test]
fn a_byte_store_passes_the_corrupt_payload_conformance_check() {
    conformance::block_on(conformance::corrupt_payload_is_a_typed_error(
        &ByteHarness::default(),
    ));
    conformance::block_on(conformance::corrupt_payload_is_a_typed_error(
        &conformance::DynHarness(ByteHarness::default()),
    ));
}
