//! Round trips through every part (`T -> Value -> bytes -> Value -> T`),
//! and the fixtures the tests of the other files share.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Debug;

use bincode::config;
use bincode::error::DecodeError;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::{
    Cursor, Packed, Value, encode_entry, enum_value, from_encoded, from_value, to_value, validate,
};

pub(super) fn encode(value: &Value) -> Vec<u8> {
    bincode::encode_to_vec(value, config::standard()).expect("encode")
}

pub(super) fn decode(bytes: &[u8]) -> Result<Value, DecodeError> {
    let (value, read): (Value, usize) = bincode::decode_from_slice(bytes, config::standard())?;
    assert_eq!(read, bytes.len(), "trailing bytes after a value");
    Ok(value)
}

/// Every path, checked against the others:
/// - the context's: `T` -> bytes (the writer) -> `T` (the reader), the bytes
///   canonical (`validate`) and decodable into `to_value(input)`;
/// - the `Value`'s: `T -> Value -> bytes -> Value -> T`, the `Value`
///   encoding to the same bytes as `T` did;
/// - a `Value` read from the bytes through serde is the decoded one.
///
/// Returns the context path's `T`.
pub(super) fn roundtrip<T: Serialize + DeserializeOwned>(input: &T) -> T {
    let value = to_value(input).expect("to_value");
    let bytes = encode(&value);
    let decoded = decode(&bytes).expect("decode");
    assert_eq!(decoded, value, "bincode round trip changed the value");
    let via_value: T = from_value(&decoded).expect("from_value");

    let entry = encode_entry("k", input).expect("the writer");
    assert_eq!(
        entry.bytes(),
        &bytes[..],
        "the writer and the Value encode alike"
    );
    let mut cursor = Cursor::new(entry.bytes());
    validate(&mut cursor).expect("canonical");
    assert_eq!(cursor.remaining(), 0);
    assert_eq!(
        &*entry.value(),
        &value,
        "the bytes decode to to_value's value"
    );
    let as_value: Value = from_encoded(entry.bytes()).expect("a Value through serde");
    assert_eq!(as_value, value, "Value::deserialize from the bytes");
    let via_bytes: T = from_encoded(entry.bytes()).expect("from_encoded");
    let again = encode_entry("k", &via_bytes).expect("re-encodes");
    assert_eq!(
        again.bytes(),
        entry.bytes(),
        "the byte path changed the value"
    );
    let again = encode_entry("k", &via_value).expect("re-encodes");
    assert_eq!(
        again.bytes(),
        entry.bytes(),
        "the Value path changed the value"
    );
    via_bytes
}

pub(super) fn assert_roundtrip<T: Serialize + DeserializeOwned + PartialEq + Debug>(input: T) {
    assert_eq!(roundtrip(&input), input);
}

pub(super) fn nested_some(depth: usize) -> Value {
    let mut value = Value::Unit;
    for _ in 0..depth {
        value = Value::Some(Box::new(value));
    }
    value
}

#[derive(Serialize, Deserialize, Debug, PartialEq, Clone)]
pub(super) struct UnitStruct;

#[derive(Serialize, Deserialize, Debug, PartialEq, Clone)]
pub(super) struct Meters(u32);

#[derive(Serialize, Deserialize, Debug, PartialEq, Clone)]
pub(super) struct Pair(i8, String);

#[derive(Serialize, Deserialize, Debug, PartialEq, Clone)]
pub(super) struct Inner {
    name: String,
    tags: Vec<String>,
    score: f64,
}

#[derive(Serialize, Deserialize, Debug, PartialEq, Clone)]
pub(super) struct Outer {
    id: u64,
    inner: Inner,
    list: Vec<Inner>,
    by_name: HashMap<String, Inner>,
    labels: BTreeMap<u32, String>,
    maybe: Option<Inner>,
    pair: Pair,
    unit: UnitStruct,
    meters: Meters,
}

#[derive(Serialize, Deserialize, Debug, PartialEq, Clone)]
pub(super) enum Shape {
    Empty,
    Circle(u32),
    Rect(i8, String),
    Poly { sides: u32, label: Option<String> },
    UnitInside(()),
    NoFields(),
    Pair(i16, i16),
}

#[derive(Serialize, Deserialize, Debug, PartialEq)]
pub(super) struct Sparse {
    always: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    maybe: Option<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    list: Vec<u32>,
    #[serde(skip)]
    never: u32,
}

pub(super) fn sample_inner(name: &str) -> Inner {
    Inner {
        name: name.to_owned(),
        tags: vec!["a".into(), "ü".into()],
        score: -2.5,
    }
}

pub(super) fn sample_outer() -> Outer {
    let mut by_name = HashMap::new();
    by_name.insert("ключ".to_owned(), sample_inner("x"));
    by_name.insert("日本".to_owned(), sample_inner("y"));
    Outer {
        id: u64::MAX,
        inner: sample_inner("root"),
        list: vec![sample_inner("l1"), sample_inner("l2")],
        by_name,
        labels: [(3, "three".to_owned()), (1, "one".to_owned())].into(),
        maybe: Some(sample_inner("m")),
        pair: Pair(-7, "p".into()),
        unit: UnitStruct,
        meters: Meters(12),
    }
}

// -- round trips -------------------------------------------------------

#[test]
fn integer_extremes_round_trip() {
    assert_roundtrip(u64::MAX);
    assert_roundtrip(i64::MIN);
    assert_roundtrip(i64::MAX);
    assert_roundtrip(i128::MIN);
    assert_roundtrip(i128::MAX);
    assert_roundtrip(u128::MAX);
    assert_roundtrip(200u8);
    assert_roundtrip(-300i16);
    assert_roundtrip(usize::MAX);
    assert_roundtrip(isize::MIN);
    assert_eq!(to_value(&200u8), Ok(Value::U64(200)));
    assert_eq!(to_value(&-300i16), Ok(Value::I64(-300)));
    assert_eq!(to_value(&i128::MIN), Ok(Value::I128(i128::MIN)));
    assert_eq!(to_value(&u128::MAX), Ok(Value::U128(u128::MAX)));
}

#[test]
fn f64_round_trip_keeps_bits() {
    let custom_nan = f64::from_bits(0x7ff8_0000_0000_1234);
    for x in [
        1.5,
        -0.0,
        0.0,
        f64::NAN,
        -f64::NAN,
        custom_nan,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::MIN_POSITIVE,
        f64::MAX,
        f64::EPSILON,
    ] {
        let back: f64 = roundtrip(&x);
        assert_eq!(back.to_bits(), x.to_bits(), "bits of {x:?}");
    }
    assert!(roundtrip(&-0.0f64).is_sign_negative());
}

#[test]
fn f32_round_trip_keeps_bits() {
    for x in [
        1.25f32,
        -0.0,
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::MAX,
        f32::MIN_POSITIVE,
        0.1,
    ] {
        let back: f32 = roundtrip(&x);
        assert_eq!(back.to_bits(), x.to_bits(), "bits of {x:?}");
    }
    assert_eq!(to_value(&0.1f32), Ok(Value::F64(f64::from(0.1f32))));
    // In a sequence, f32s stay f32s.
    let all = vec![
        1.25f32,
        -0.0,
        f32::NAN,
        f32::from_bits(0x7fc0_1234),
        f32::MIN_POSITIVE,
    ];
    let back: Vec<f32> = roundtrip(&all);
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&back), bits(&all));
    assert_eq!(
        to_value(&all[..1]),
        Ok(Value::Packed(Packed::F32(vec![1.25])))
    );
}

#[test]
fn bool_char_and_strings_round_trip() {
    assert_roundtrip(true);
    assert_roundtrip(false);
    assert_roundtrip('a');
    assert_roundtrip('é');
    assert_roundtrip('🦀');
    assert_roundtrip(String::new());
    assert_roundtrip("ключ 日本 🦀 \u{0} \"quoted\"\n".to_owned());
    assert_eq!(to_value(&'x'), Ok(Value::Char('x')));
}

#[test]
fn unicode_map_keys_round_trip() {
    let map: BTreeMap<String, u32> = [
        ("ключ".to_owned(), 1),
        ("日本".to_owned(), 2),
        ("🦀🎉".to_owned(), 3),
        (String::new(), 4),
    ]
    .into();
    assert_roundtrip(map.clone());
    let hash: HashMap<String, u32> = map.into_iter().collect();
    assert_roundtrip(hash);
}

#[test]
fn bytes_round_trip_as_bytes() {
    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct Blob {
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    }
    let blob = Blob {
        data: vec![0, 1, 2, 255, b'"'],
    };
    let value = to_value(&blob).expect("to_value");
    let expected: BTreeMap<Value, Value> =
        [(Value::from("data"), Value::Bytes(vec![0, 1, 2, 255, b'"']))].into();
    assert_eq!(value, Value::Map(expected));
    assert_roundtrip(blob);

    let buf = serde_bytes::ByteBuf::from(vec![9u8; 70_000]);
    assert_eq!(to_value(&buf), Ok(Value::Bytes(vec![9u8; 70_000])));
    assert_roundtrip(buf);
    assert_roundtrip(serde_bytes::ByteBuf::new());
}

#[test]
fn sequences_and_tuples_round_trip() {
    assert_roundtrip(vec![1u32, 2, 3, u32::MAX]);
    assert_roundtrip(Vec::<u32>::new());
    assert_roundtrip(vec![0u8, 255]); // plain Vec<u8> is a packed sequence
    assert_eq!(
        to_value(&vec![0u8, 255]),
        Ok(Value::Packed(Packed::U8(vec![0, 255])))
    );
    assert_eq!(
        to_value(&[1u32, 2]),
        Ok(Value::Packed(Packed::U32(vec![1, 2])))
    );
    // A sequence of mixed types is generic, however it starts.
    assert_eq!(
        to_value(&(1u8, 2u16)),
        Ok(Value::Seq(vec![Value::U64(1), Value::U64(2)]))
    );
    assert_eq!(to_value(&Vec::<u8>::new()), Ok(Value::Seq(vec![])));
    assert_roundtrip((1u8, "two".to_owned(), false, 4.5f64));
    assert_roundtrip(((1i32, -1i64), [7u16; 3], ('c', ())));
    assert_roundtrip(vec![vec![Some(1u8), None], vec![]]);
    let set: BTreeSet<i32> = [3, -1, 7].into();
    assert_roundtrip(set);
}

#[test]
fn options_round_trip_exactly() {
    assert_roundtrip(Some(5u32));
    assert_roundtrip(None::<u32>);
    assert_roundtrip(None::<Option<u32>>);
    assert_roundtrip(Some(None::<u32>));
    assert_roundtrip(Some(Some(3u32)));
    assert_roundtrip(Some(()));
    assert_eq!(to_value(&None::<Option<u32>>), Ok(Value::None));
    assert_eq!(
        to_value(&Some(None::<u32>)),
        Ok(Value::Some(Box::new(Value::None)))
    );
    assert_eq!(
        to_value(&Some(Some(3u32))),
        Ok(Value::Some(Box::new(Value::Some(Box::new(Value::U64(3))))))
    );
}

#[test]
fn unit_unit_struct_newtype_struct_round_trip() {
    assert_roundtrip(());
    assert_roundtrip(UnitStruct);
    assert_roundtrip(Meters(42));
    assert_roundtrip(Pair(-1, "x".into()));
    assert_eq!(to_value(&()), Ok(Value::Unit));
    assert_eq!(to_value(&UnitStruct), Ok(Value::Unit));
    // Newtype structs are transparent.
    assert_eq!(to_value(&Meters(42)), Ok(Value::U64(42)));
    assert_eq!(from_value::<Meters>(&Value::U64(42)), Ok(Meters(42)));
}

#[test]
fn nested_structs_round_trip() {
    let outer = sample_outer();
    assert_roundtrip(outer.clone());
    let value = to_value(&outer).expect("to_value");
    let Value::Map(map) = &value else {
        panic!("struct should be a map, got {value}");
    };
    // Non-string map keys stay typed.
    let labels = map.get(&Value::from("labels")).expect("labels field");
    let expected: BTreeMap<Value, Value> = [
        (Value::U64(1), Value::from("one")),
        (Value::U64(3), Value::from("three")),
    ]
    .into();
    assert_eq!(labels, &Value::Map(expected));
    assert_eq!(map.get(&Value::from("id")), Some(&Value::U64(u64::MAX)));
}

#[test]
fn enums_round_trip_all_variant_kinds() {
    let all = vec![
        Shape::Empty,
        Shape::Circle(3),
        Shape::Rect(-2, "r".into()),
        Shape::Poly {
            sides: 5,
            label: Some("penta".into()),
        },
        Shape::Poly {
            sides: 0,
            label: None,
        },
        Shape::UnitInside(()),
        Shape::NoFields(),
        Shape::Pair(-1, i16::MAX),
    ];
    for shape in &all {
        assert_roundtrip(shape.clone());
    }
    assert_roundtrip(all);
    assert_eq!(
        to_value(&Shape::Empty),
        Ok(enum_value("Empty", Value::Unit))
    );
    assert_eq!(
        to_value(&Shape::Circle(3)),
        Ok(enum_value("Circle", Value::U64(3)))
    );
    assert_eq!(
        to_value(&Shape::Rect(-2, "r".into())),
        Ok(enum_value(
            "Rect",
            Value::Seq(vec![Value::I64(-2), Value::from("r")])
        ))
    );
    assert_eq!(
        to_value(&Shape::Pair(3, 4)),
        Ok(enum_value("Pair", Value::Packed(Packed::I16(vec![3, 4]))))
    );
    let fields: BTreeMap<Value, Value> = [
        (Value::from("sides"), Value::U64(5)),
        (Value::from("label"), Value::None),
    ]
    .into();
    assert_eq!(
        to_value(&Shape::Poly {
            sides: 5,
            label: None
        }),
        Ok(enum_value("Poly", Value::Map(fields)))
    );
    // Enum as map key.
    let keyed: BTreeMap<u8, Shape> = [(1, Shape::Empty), (2, Shape::Circle(1))].into();
    assert_roundtrip(keyed);
}

#[test]
fn skipped_fields_are_absent_and_default_back() {
    let sparse = Sparse {
        always: 1,
        maybe: None,
        list: vec![],
        never: 99,
    };
    let value = to_value(&sparse).expect("to_value");
    let expected: BTreeMap<Value, Value> = [(Value::from("always"), Value::U64(1))].into();
    assert_eq!(value, Value::Map(expected));
    let back: Sparse = roundtrip(&sparse);
    assert_eq!(
        back,
        Sparse {
            always: 1,
            maybe: None,
            list: vec![],
            never: 0
        }
    );
    let full = Sparse {
        always: 2,
        maybe: Some(3),
        list: vec![4],
        never: 0,
    };
    assert_roundtrip(full);
}

#[test]
fn flatten_tagged_and_untagged_enums_round_trip() {
    #[derive(Serialize, Deserialize, Debug, PartialEq, Clone)]
    enum Mode {
        Fast,
        Slow { factor: u32 },
        Named(String),
    }
    #[derive(Serialize, Deserialize, Debug, PartialEq, Clone)]
    struct Extra {
        mode: Mode,
        other: Mode,
        note: String,
    }
    #[derive(Serialize, Deserialize, Debug, PartialEq, Clone)]
    struct WithFlatten {
        id: u32,
        #[serde(flatten)]
        extra: Extra,
    }
    #[derive(Serialize, Deserialize, Debug, PartialEq, Clone)]
    #[serde(tag = "type")]
    enum Tagged {
        A { mode: Mode },
        B(Inner),
    }
    #[derive(Serialize, Deserialize, Debug, PartialEq, Clone)]
    #[serde(untagged)]
    enum Untagged {
        Num(u64),
        Text(String),
        Moded { mode: Mode },
    }
    assert_roundtrip(WithFlatten {
        id: 7,
        extra: Extra {
            mode: Mode::Slow { factor: 3 },
            other: Mode::Fast,
            note: "n".into(),
        },
    });
    assert_roundtrip(Tagged::A {
        mode: Mode::Named("x".into()),
    });
    assert_roundtrip(Tagged::B(sample_inner("b")));
    assert_roundtrip(vec![
        Untagged::Num(1),
        Untagged::Text("t".into()),
        Untagged::Moded { mode: Mode::Fast },
    ]);
}

#[test]
fn std_types_use_compact_form() {
    use std::net::{IpAddr, Ipv6Addr, SocketAddr};
    use std::time::Duration;
    assert_roundtrip(IpAddr::from([10, 0, 0, 1]));
    assert_roundtrip(IpAddr::from(Ipv6Addr::LOCALHOST));
    assert_roundtrip(SocketAddr::from(([127, 0, 0, 1], 8080)));
    assert_roundtrip(Duration::new(5, 123));
    // Not human readable: an IP address is not a string.
    let ip = to_value(&IpAddr::from([10, 0, 0, 1])).expect("to_value");
    assert_eq!(ip.kind(), "enum");
}

// -- Value itself through serde ------------------------------------------

pub(super) fn every_kind() -> Value {
    let mut map = BTreeMap::new();
    map.insert(Value::from("k"), Value::I128(-5));
    map.insert(Value::U64(1), Value::Bytes(vec![1, 2]));
    map.insert(
        enum_value("Key", Value::Unit),
        Value::Some(Box::new(Value::None)),
    );
    Value::Seq(vec![
        Value::Unit,
        Value::Bool(true),
        Value::I64(-1),
        Value::U64(2),
        Value::U128(u128::MAX),
        Value::F64(f64::NAN),
        Value::F64(-0.0),
        Value::Char('🦀'),
        Value::from("s"),
        Value::Bytes(vec![]),
        Value::None,
        Value::Some(Box::new(Value::Some(Box::new(Value::Unit)))),
        Value::Map(map),
        enum_value("Unit", Value::Unit),
        enum_value("Newtype", enum_value("Nested", Value::U64(1))),
        enum_value("Tuple", Value::Seq(vec![Value::Unit])),
        enum_value("Struct", Value::Map(BTreeMap::new())),
        Value::Packed(Packed::F32(vec![0.5, f32::NAN])),
    ])
}

#[test]
fn value_serde_is_identity() {
    let value = every_kind();
    assert_eq!(to_value(&value), Ok(value.clone()));
    assert_eq!(from_value::<Value>(&value), Ok(value.clone()));
    // As a field of a user type, through the full pipeline.
    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct Holder {
        v: Value,
        list: Vec<Value>,
    }
    assert_roundtrip(Holder {
        v: value.clone(),
        list: vec![value, Value::None],
    });
}

/// Deterministic pseudo-random values of every kind (packed sequences of
/// every element type included), nested up to `depth`.
pub(super) fn arbitrary(seed: &mut u64, depth: usize) -> Value {
    let mut next = || {
        *seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        *seed >> 33
    };
    let pick = next() % if depth == 0 { 12 } else { 16 };
    let small = next() % 300;
    let big = next() << 40 | next();
    let n = (small % 7) as usize;
    match pick {
        0 => Value::Unit,
        1 => Value::Bool(small % 2 == 0),
        2 => Value::I64(if small % 2 == 0 {
            -(big as i64)
        } else {
            small as i64
        }),
        3 => Value::U64(if small % 3 == 0 { big } else { small }),
        4 => Value::I128(-(i128::from(big) << (small % 70))),
        5 => Value::U128(u128::from(big) << (small % 70)),
        6 => Value::F64(if small % 5 == 0 {
            f64::from_bits(big)
        } else {
            small as f64 / 7.0
        }),
        7 => Value::Char(char::from_u32(small as u32 * 97).unwrap_or('x')),
        8 => Value::String("ü".repeat(small as usize % 40)),
        9 => Value::Bytes(vec![1; small as usize]),
        10 => Value::None,
        11 => Value::Packed(match small % 11 {
            0 => Packed::U8(vec![big as u8; n + 1]),
            1 => Packed::I8(vec![big as i8; n + 1]),
            2 => Packed::U16(vec![big as u16; n + 1]),
            3 => Packed::I16(vec![big as i16; n + 1]),
            4 => Packed::U32(vec![big as u32; n + 1]),
            5 => Packed::I32(vec![big as i32; n + 1]),
            6 => Packed::U64(vec![big; n + 1]),
            7 => Packed::I64(vec![-(big as i64); n + 1]),
            8 => Packed::F32(vec![f32::from_bits(big as u32); n + 1]),
            9 => Packed::F64(vec![f64::from_bits(big); n + 1]),
            _ => Packed::Bool(vec![big % 2 == 0; n + 1]),
        }),
        12 => Value::Some(Box::new(arbitrary(seed, depth - 1))),
        13 => Value::Seq((0..small % 6).map(|_| arbitrary(seed, depth - 1)).collect()),
        14 => Value::Map(
            (0..small % 5)
                .map(|_| (arbitrary(seed, 0), arbitrary(seed, depth - 1)))
                .collect(),
        ),
        _ => Value::Enum {
            variant: "variant".repeat(small as usize % 3),
            value: Box::new(arbitrary(seed, depth - 1)),
        },
    }
}
