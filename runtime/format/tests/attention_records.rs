//! Attention records with and without the optional score mask: a record written before the mask
//! existed (12 slots) still decodes, unchanged, with no mask; a masked record has a 13th slot
//! before `y`, and the mask is listed among the inputs.

use kestrel_rt_format::ops::*;

// x, wq, bq?, wk?, bk?, wv?, bv?, wa?, ba?, wo, bo?, y; variant, heads, causal, scale.
const PLAIN: [u32; 12] = [0, 1, 2, 3, NONE, 5, 6, NONE, NONE, 9, NONE, 11];

fn attrs() -> [u32; 4] {
    [AttentionVariant::Standard as u32, 2, 0, 0.25f32.to_bits()]
}

#[test]
fn a_record_without_a_mask_is_the_twelve_slot_record() {
    let op = Op::decode(kind::ATTENTION, &PLAIN, &attrs()).unwrap();
    let Op::Attention(a) = op else { panic!("{op:?}") };
    assert_eq!(a.mask, None);
    assert_eq!((a.x, a.y, a.heads, a.causal), (0, 11, 2, false));
    // Re-encoding writes exactly the old record: files without a mask are byte-identical.
    assert_eq!(op.encode().tensors(), PLAIN);
    assert_eq!(op.encode().attrs(), attrs());
}

#[test]
fn a_masked_record_has_the_mask_slot_before_y_and_round_trips() {
    let mut slots = PLAIN.to_vec();
    slots.insert(11, 12);
    let op = Op::decode(kind::ATTENTION, &slots, &attrs()).unwrap();
    let Op::Attention(a) = op else { panic!("{op:?}") };
    assert_eq!((a.mask, a.y), (Some(12), 11));
    assert_eq!(op.encode().tensors(), &slots[..]);
    assert_eq!((op.output(), op.main_input()), (11, 0));
    let mut inputs = Vec::new();
    op.for_each_input(|t| inputs.push(t));
    assert_eq!(inputs, [0, 1, 2, 3, 5, 6, 9, 12]);
    // Dropping the mask gives back the old record.
    let plain = Op::Attention(Attention { mask: None, ..a });
    assert_eq!(plain.encode().tensors(), PLAIN);
}

#[test]
fn a_thirteenth_slot_must_hold_the_mask_and_other_counts_are_rejected() {
    let mut slots = PLAIN.to_vec();
    slots.insert(11, NONE);
    let e = Op::decode(kind::ATTENTION, &slots, &attrs()).unwrap_err();
    assert!(matches!(e, OpError::MissingTensor { slot: "mask", .. }), "{e:?}");
    for n in [11, 14] {
        let t = vec![0u32; n];
        let e = Op::decode(kind::ATTENTION, &t, &attrs()).unwrap_err();
        assert!(matches!(e, OpError::TensorCount { found, .. } if found == n), "{n}: {e:?}");
    }
}

#[test]
fn int8_internals_are_a_fifth_attribute_and_f32_records_are_unchanged() {
    let op = Op::decode(kind::ATTENTION, &PLAIN, &attrs()).unwrap();
    let Op::Attention(a) = op else { panic!("{op:?}") };
    assert_eq!(a.internals, Internals::F32);
    let int8 = Op::Attention(Attention { internals: Internals::Int8, ..a });
    let rec = int8.encode();
    let mut want = attrs().to_vec();
    want.push(Internals::Int8 as u32);
    assert_eq!(rec.attrs(), &want[..]);
    assert_eq!(Op::decode(kind::ATTENTION, rec.tensors(), rec.attrs()).unwrap(), int8);
    // An unknown code is an error naming the attribute, not a silent f32.
    want[4] = 7;
    let e = Op::decode(kind::ATTENTION, &PLAIN, &want).unwrap_err();
    assert!(format!("{e:?}").contains("internals"), "{e:?}");
}
