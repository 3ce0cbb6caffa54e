//! Lstm and Gru records: slot and attribute counts, attribute domains, the optional states, the
//! LSTM's optional peephole slot and the GRU's optional reset attribute, and the round trip
//! through `Op::encode` / `Op::decode`.

use kestrel_rt_format::ops::*;

/// Decodes the record, checks it is `want`, and that `want` encodes back to the same words.
fn round_trip(kind: u16, tensors: &[u32], attrs: &[u32], want: Op) -> Op {
    let op = Op::decode(kind, tensors, attrs).unwrap();
    assert_eq!(op, want);
    assert_eq!(op.encode().tensors(), tensors);
    assert_eq!(op.encode().attrs(), attrs);
    op
}

#[test]
fn lstm_and_gru_records_round_trip_and_are_validated() {
    // Lstm: x, w, r, b, h0?, c0?, y; hidden, direction, output.
    let lstm = [0u32, 1, 2, 3, NONE, 5, 6];
    let want = Lstm {
        x: 0,
        w: 1,
        r: 2,
        b: 3,
        h0: None,
        c0: Some(5),
        p: None,
        hidden: 16,
        direction: RnnDirection::Bidirectional,
        output: RnnOutput::Cell,
        y: 6,
    };
    let want_lstm = want;
    let op = round_trip(kind::LSTM, &lstm, &[16, 2, 2], Op::Lstm(want));
    assert_eq!((op.name(), op.output(), op.main_input(), op.kind_is_mechanism()), ("Lstm", 6, 0, false));
    let mut inputs = Vec::new();
    op.for_each_input(|t| inputs.push(t));
    assert_eq!(inputs, [0, 1, 2, 3, 5]);
    // Gru: x, w, r, b, h0?, y.
    let gru = [0u32, 1, 2, 3, 4, 5];
    let want = Gru {
        x: 0,
        w: 1,
        r: 2,
        b: 3,
        h0: Some(4),
        hidden: 8,
        direction: RnnDirection::Reverse,
        output: RnnOutput::Hidden,
        reset: GruReset::Product,
        y: 5,
    };
    let want_gru = want;
    let op = round_trip(kind::GRU, &gru, &[8, 1, 1], Op::Gru(want));
    assert_eq!(op.name(), "Gru");

    let bad = |k, t: &[u32], a: &[u32]| Op::decode(k, t, a).unwrap_err();
    assert!(matches!(bad(kind::LSTM, &lstm, &[0, 0, 0]), OpError::BadAttr { attr: "hidden", value: 0, .. }));
    assert!(matches!(bad(kind::LSTM, &lstm, &[4, 3, 0]), OpError::BadAttr { attr: "direction", value: 3, .. }));
    assert!(matches!(bad(kind::LSTM, &lstm, &[4, 0, 3]), OpError::BadAttr { attr: "output", value: 3, .. }));
    assert!(matches!(bad(kind::GRU, &gru, &[4, 0, 2]), OpError::BadAttr { value: 2, .. }));
    assert!(matches!(bad(kind::LSTM, &gru, &[4, 0, 0]), OpError::TensorCount { expected: 7, found: 6, .. }));
    assert!(matches!(bad(kind::GRU, &gru, &[4, 0]), OpError::AttrCount { expected: 3, found: 2, .. }));
    assert!(matches!(bad(kind::LSTM, &[0, 1, 2, NONE, 4, 5, 6], &[4, 0, 0]), OpError::MissingTensor { slot: "b", .. }));
    assert!(matches!(bad(kind::GRU, &[0, NONE, 2, 3, 4, 5], &[4, 0, 0]), OpError::MissingTensor { slot: "w", .. }));
    // The LSTM's peepholes: an 8th slot before y, in the record only when present (never NONE
    // there); a 7-slot record has none.
    let peep = Op::Lstm(Lstm { p: Some(7), y: 8, ..want_lstm });
    round_trip(kind::LSTM, &[0, 1, 2, 3, NONE, 5, 7, 8], &[16, 2, 2], peep);
    assert!(matches!(
        bad(kind::LSTM, &[0, 1, 2, 3, NONE, 5, NONE, 8], &[16, 2, 2]),
        OpError::MissingTensor { slot: "p", .. }
    ));
    assert!(matches!(bad(kind::LSTM, &[0; 9], &[16, 2, 2]), OpError::TensorCount { expected: 7, found: 9, .. }));
    // The GRU's reset gate on the state: a 4th attribute, written only when 1.
    let state = Op::Gru(Gru { reset: GruReset::State, ..want_gru });
    round_trip(kind::GRU, &gru, &[8, 1, 1, 1], state);
    let explicit = Op::decode(kind::GRU, &gru, &[8, 1, 1, 0]).unwrap();
    assert_eq!(explicit, Op::Gru(want_gru));
    assert_eq!(explicit.encode().attrs(), [8, 1, 1]);
    assert!(matches!(bad(kind::GRU, &gru, &[8, 1, 1, 2]), OpError::BadAttr { attr: "reset", value: 2, .. }));
    assert!(matches!(bad(kind::GRU, &gru, &[8, 1, 1, 1, 0]), OpError::AttrCount { expected: 3, found: 5, .. }));
    assert_eq!(kind_name(kind::LSTM), Some("Lstm"));
    assert_eq!(kind_name(kind::GRU), Some("Gru"));
    assert_eq!(kind_name(kind::SLICE), Some("Slice"));
    assert_eq!(kind_name(kind::SDPA), Some("Sdpa"));
    assert_eq!(kind_name(kind::GATHER), Some("Gather"));
    assert_eq!(kind_name(kind::CHAIN), Some("Chain"));
    assert_eq!(kind_name(30), None);
}

#[test]
fn directions() {
    assert_eq!(RnnDirection::Forward.dirs(), 1);
    assert_eq!(RnnDirection::Bidirectional.dirs(), 2);
    assert!(!RnnDirection::Forward.reversed(0));
    assert!(RnnDirection::Reverse.reversed(0));
    assert!(!RnnDirection::Bidirectional.reversed(0) && RnnDirection::Bidirectional.reversed(1));
}
