//! What a context value costs in memory and in a checkpoint, counted by a
//! counting global allocator (contract rule 17, issue 11 "compact values").
//!
//! Every shape of value (a plain `Vec<u8>`, a `Vec<f32>`, a `String`, many
//! small nested structs, a map of vectors) costs at most about twice its
//! encoded size once set, and its checkpoint as much; a 50 MB `Vec<u8>` is
//! set, checkpointed, decoded and read back with the process's peak memory
//! well under three times its size. The counts are of bytes requested from
//! the allocator, so they are deterministic: no timing is involved.
//!
//! The counter is process-wide, so the tests take turns (`LOCK`).
#![allow(unsafe_code)] // the counting allocator: `GlobalAlloc` is an unsafe trait

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use fluxio_core::Context;
use fluxio_core::store::Checkpoint;
use serde::{Deserialize, Serialize};

/// The system allocator, counting the bytes live and the most ever live.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(n: usize) {
    let now = LIVE.fetch_add(n, Ordering::SeqCst) + n;
    PEAK.fetch_max(now, Ordering::SeqCst);
}

fn shrank(n: usize) {
    LIVE.fetch_sub(n, Ordering::SeqCst);
}

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged, so `System`'s guarantees are ours; the counting only reads
// sizes and touches atomics (it never allocates).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is (see above).
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as is.
        unsafe { System.dealloc(ptr, layout) };
        shrank(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded as is.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            // Counted as a copy: both blocks may exist at once.
            grew(new_size);
            shrank(layout.size());
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

static LOCK: Mutex<()> = Mutex::new(());

/// One test at a time: the counter is the process's.
fn alone() -> MutexGuard<'static, ()> {
    LOCK.lock().unwrap_or_else(PoisonError::into_inner)
}

fn live() -> usize {
    LIVE.load(Ordering::SeqCst)
}

/// Starts a peak measurement at what is live now.
fn reset_peak() -> usize {
    let now = live();
    PEAK.store(now, Ordering::SeqCst);
    now
}

fn peak() -> usize {
    PEAK.load(Ordering::SeqCst)
}

/// Allowance for the bookkeeping around a value: the map node a new key
/// copies, the shared entry's header, the key itself.
const SLACK: usize = 8 * 1024;

const MB: usize = 1 << 20;

/// The bytes the entry `key => value` adds to a checkpoint: the value's
/// encoded size (with its key's).
fn encoded_size(ctx: &Context) -> usize {
    let with = Checkpoint::new("r", "v", 0, "s", ctx.snapshot());
    let without = Checkpoint::new("r", "v", 0, "s", Context::new().snapshot());
    let bytes = |cp: &Checkpoint| cp.to_bytes().expect("encodes").len();
    bytes(&with) - bytes(&without)
}

/// Sets `value`, and checks what it costs: the bytes `set` leaves live,
/// and the checkpoint's size, each at most twice the encoding (plus
/// [`SLACK`]). Returns the encoded size.
fn costs_at_most_twice_its_encoding<T: Serialize>(name: &str, value: &T) -> usize {
    let empty = Context::new();
    let before = live();
    let ctx = empty.set("value", value).expect("set");
    let kept = live() - before;
    let encoded = encoded_size(&ctx);
    let checkpoint = Checkpoint::new("r", "v", 0, "s", ctx.snapshot())
        .to_bytes()
        .expect("encodes")
        .len();
    println!("{name}: encoded {encoded} B, kept by set {kept} B, checkpoint {checkpoint} B");
    assert!(
        kept <= 2 * encoded + SLACK,
        "{name}: set keeps {kept} bytes for a value of {encoded} bytes encoded"
    );
    assert!(
        checkpoint <= 2 * encoded + SLACK,
        "{name}: a checkpoint of {checkpoint} bytes for a value of {encoded} bytes encoded"
    );
    drop(ctx);
    encoded
}

#[derive(Serialize, Deserialize, Debug, PartialEq)]
struct Point {
    x: i32,
    y: i32,
}

#[derive(Serialize, Deserialize, Debug, PartialEq)]
struct Item {
    id: u64,
    name: String,
    tags: Vec<u16>,
    at: Point,
    note: Option<String>,
}

fn items(n: u64) -> Vec<Item> {
    (0..n)
        .map(|i| Item {
            id: i * 7919,
            name: format!("item-{i}"),
            tags: vec![(i % 300) as u16, 1, 2],
            at: Point {
                x: -(i as i32),
                y: i as i32 * 3,
            },
            note: (i % 3 == 0).then(|| "n".repeat((i % 17) as usize)),
        })
        .collect()
}

#[test]
fn rule17_every_shape_costs_at_most_twice_its_encoded_size_in_memory_and_in_a_checkpoint() {
    let _alone = alone();

    // Plain byte, float and text buffers: about one byte per byte.
    let bytes: Vec<u8> = (0..MB).map(|i| (i % 251) as u8).collect();
    let encoded = costs_at_most_twice_its_encoding("Vec<u8> 1 MiB", &bytes);
    assert!(encoded <= MB + 32, "a Vec<u8> is packed: {encoded} bytes");

    let floats: Vec<f32> = (0..256 * 1024).map(|i| i as f32 / 3.0).collect();
    let encoded = costs_at_most_twice_its_encoding("Vec<f32> 256 Ki", &floats);
    assert!(
        encoded <= MB + 32,
        "f32s keep 4 bytes each: {encoded} bytes"
    );

    let text = "ü-text ".repeat(MB / 8);
    let encoded = costs_at_most_twice_its_encoding("String 1 MiB", &text);
    assert!(encoded <= text.len() + 32);

    // Many small nested structs: the encoding is compact too (field names
    // and tags included, under twice what bincode takes for them).
    let items = items(10_000);
    let encoded = costs_at_most_twice_its_encoding("Vec<Item> 10,000", &items);
    let raw: usize = items
        .iter()
        .map(|i| 8 + 4 + i.name.len() + 6 + 8 + 1 + i.note.as_ref().map_or(0, String::len))
        .sum();
    assert!(
        encoded < 4 * raw,
        "{encoded} bytes for {raw} bytes of fields"
    );

    let map: HashMap<String, Vec<u64>> = (0..2_000u64)
        .map(|i| (format!("key-{i}"), (0..(i % 40)).map(|j| j * i).collect()))
        .collect();
    costs_at_most_twice_its_encoding("HashMap<String, Vec<u64>>", &map);

    // And they read back.
    let ctx = Context::new()
        .set("bytes", &bytes)
        .and_then(|c| c.set("floats", &floats))
        .and_then(|c| c.set("items", &items))
        .and_then(|c| c.set("map", &map))
        .expect("set");
    let cp = Checkpoint::new("r", "v", 0, "s", ctx.snapshot());
    let back = Checkpoint::from_bytes("r", &cp.to_bytes().expect("encodes")).expect("decodes");
    let back = back.context.to_context();
    assert_eq!(back.get::<Vec<u8>>("bytes").expect("bytes"), bytes);
    assert_eq!(back.get::<Vec<f32>>("floats").expect("floats"), floats);
    assert_eq!(back.get::<Vec<Item>>("items").expect("items"), items);
    assert_eq!(
        back.get::<HashMap<String, Vec<u64>>>("map").expect("map"),
        map
    );
    assert_eq!(back, ctx);
}

/// `i`th byte of the big value, recomputed instead of kept.
fn byte(i: usize) -> u8 {
    (i.wrapping_mul(2_654_435_761) >> 7) as u8
}

#[test]
fn rule17_a_50_mb_vec_u8_is_set_checkpointed_and_read_back() {
    let _alone = alone();
    const SIZE: usize = 50 * 1000 * 1000;
    let start = reset_peak();

    let data: Vec<u8> = (0..SIZE).map(byte).collect();
    // set: one buffer of the encoding, written in one copy
    let before = reset_peak();
    let ctx = Context::new()
        .set("blob", data)
        .expect("a 50 MB Vec<u8> is set");
    let set_peak = peak() - before;
    let mut overall = peak();
    let kept = live() + SIZE - before; // `data` was moved in and dropped
    println!("set: peak +{set_peak} B, kept {kept} B");
    assert!(
        set_peak <= SIZE + SIZE / 20,
        "set peaked at +{set_peak} bytes"
    );
    assert!(kept <= SIZE + SLACK, "set kept {kept} bytes");

    // to_bytes: one buffer of the exact size
    let before = reset_peak();
    let bytes = Checkpoint::new("run", "v", 0, "s", ctx.snapshot())
        .to_bytes()
        .expect("checkpointed");
    let encode_peak = peak() - before;
    overall = overall.max(peak());
    println!("to_bytes: peak +{encode_peak} B, {} B", bytes.len());
    assert!(bytes.len() <= SIZE + 256);
    assert!(
        encode_peak <= SIZE + SLACK,
        "to_bytes peaked at +{encode_peak} bytes"
    );
    drop(ctx);

    // from_bytes: the value's bytes checked and copied once
    let before = reset_peak();
    let cp = Checkpoint::from_bytes("run", &bytes).expect("decoded");
    let decode_peak = peak() - before;
    overall = overall.max(peak());
    println!("from_bytes: peak +{decode_peak} B");
    assert!(
        decode_peak <= SIZE + SLACK,
        "from_bytes peaked at +{decode_peak} bytes"
    );
    drop(bytes);

    // get: one vector of the exact size
    let ctx = cp.context.to_context();
    let before = reset_peak();
    let back: Vec<u8> = ctx.get("blob").expect("read back");
    let get_peak = peak() - before;
    overall = overall.max(peak());
    println!("get: peak +{get_peak} B");
    assert!(get_peak <= SIZE + SLACK, "get peaked at +{get_peak} bytes");
    assert_eq!(back.len(), SIZE);
    assert!(
        back.iter().enumerate().all(|(i, &b)| b == byte(i)),
        "read back equal"
    );

    let overall = overall - start;
    println!(
        "overall peak: +{overall} B ({:.2}x)",
        overall as f64 / SIZE as f64
    );
    assert!(
        overall <= 5 * SIZE / 2,
        "peak {overall} bytes for a {SIZE}-byte value"
    );
}
