use super::*;

fn layout(order: Order, element_size: usize, dims: &[u64]) -> Layout {
    Layout {
        order,
        element_size,
        dims: dims.to_vec(),
    }
}

/// The byte offset of the element at logical `index` in `l`.
fn offset(l: &Layout, index: &[u64]) -> usize {
    let mut off = 0u64;
    let mut stride = 1u64;
    let axes: Vec<usize> = match l.order {
        Order::RowMajor => (0..l.dims.len()).rev().collect(),
        Order::ColumnMajor => (0..l.dims.len()).collect(),
    };
    for a in axes {
        off += index[a] * stride;
        stride *= l.dims[a];
    }
    (off as usize) * l.element_size
}

/// The transform as its definition says, element by element.
fn naive(src: &[u8], from: &Layout, to: &Layout) -> Vec<u8> {
    let mut dst = vec![0u8; src.len()];
    let n: u64 = from.dims.iter().product();
    let e = from.element_size;
    for flat in 0..n {
        let mut index = vec![0u64; from.dims.len()];
        let mut rest = flat;
        for (a, d) in from.dims.iter().enumerate() {
            index[a] = rest % d;
            rest /= d;
        }
        let (s, d) = (offset(from, &index), offset(to, &index));
        dst[d..d + e].copy_from_slice(&src[s..s + e]);
    }
    dst
}

#[test]
fn a_c_matrix_reads_in_fortran_order() {
    let src: Vec<u8> = (0i32..6).flat_map(i32::to_ne_bytes).collect();
    let c = layout(Order::RowMajor, 4, &[2, 3]);
    let fortran = layout(Order::ColumnMajor, 4, &[2, 3]);
    let mut dst = vec![0u8; 24];
    transform(&src, &c, &fortran, &mut dst).expect("same array");
    let got: Vec<i32> = dst
        .chunks_exact(4)
        .map(|b| i32::from_ne_bytes(b.try_into().expect("4 bytes")))
        .collect();
    assert_eq!(got, [0, 3, 1, 4, 2, 5]);
    // And back.
    let mut back = vec![0u8; 24];
    transform(&dst, &fortran, &c, &mut back).expect("same array");
    assert_eq!(back, src);
    // The same order is a copy.
    transform(&src, &c, &c, &mut back).expect("same array");
    assert_eq!(back, src);
}

#[test]
fn every_shape_and_element_size_matches_the_definition_both_ways() {
    // A small deterministic generator: shapes of 1 to 5 dimensions of 1 to 7, elements of
    // 1 to 16 bytes, and a few shapes larger than a block.
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = |m: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % m
    };
    let mut shapes: Vec<(usize, Vec<u64>)> = (0..300)
        .map(|_| {
            let nd = 1 + next(5) as usize;
            let e = 1 + next(16) as usize;
            (e, (0..nd).map(|_| 1 + next(7)).collect())
        })
        .collect();
    shapes.extend([
        (8, vec![100, 37]),
        (4, vec![33, 65, 3]),
        (1, vec![257, 129]),
        (16, vec![40, 41]),
        (2, vec![5, 1, 70, 1]),
    ]);
    for (e, dims) in shapes {
        let row = layout(Order::RowMajor, e, &dims);
        let col = layout(Order::ColumnMajor, e, &dims);
        let len = row.bytes().expect("small") as usize;
        let src: Vec<u8> = (0..len).map(|i| (i * 7 + i / 251) as u8).collect();
        for (from, to) in [(&row, &col), (&col, &row)] {
            let mut dst = vec![0u8; len];
            transform(&src, from, to, &mut dst).expect("same array");
            assert_eq!(dst, naive(&src, from, to), "{from} -> {to}");
            let mut back = vec![0u8; len];
            transform(&dst, to, from, &mut back).expect("same array");
            assert_eq!(back, src, "{from} -> {to} -> back");
        }
    }
}

#[test]
fn layouts_of_different_arrays_are_refused_naming_both() {
    let a = layout(Order::RowMajor, 4, &[2, 3]);
    let mut dst = vec![0u8; 24];
    let src = vec![0u8; 24];
    let err = transform(&src, &a, &layout(Order::ColumnMajor, 8, &[2, 3]), &mut dst)
        .expect_err("element sizes differ");
    let text = err.to_string();
    assert!(text.contains("row-major 2x3 of 4-byte elements"), "{text}");
    assert!(
        text.contains("column-major 2x3 of 8-byte elements"),
        "{text}"
    );
    assert!(text.contains("elements of 4 and 8 bytes"), "{text}");
    let err = transform(&src, &a, &layout(Order::ColumnMajor, 4, &[3, 2]), &mut dst)
        .expect_err("dimensions differ");
    assert!(
        err.to_string().contains("dimensions [2, 3] and [3, 2]"),
        "{err}"
    );
    let err = transform(&src[..20], &a, &a, &mut dst).expect_err("short");
    assert_eq!(
        err,
        LayoutError::Size {
            layout: "row-major 2x3 of 4-byte elements".into(),
            expected: 24,
            got: 20
        }
    );
    assert!(
        err.to_string().contains("is 24 bytes, the CDO has 20"),
        "{err}"
    );
}

#[test]
fn attributes_describe_a_layout_or_say_what_is_wrong() {
    let l = layout(Order::ColumnMajor, 8, &[4, 5, 6]);
    let mut attrs = Attributes::new();
    assert_eq!(
        Layout::from_attributes(&attrs),
        Ok(None),
        "no layout keys: none"
    );
    l.to_attributes(&mut attrs);
    assert_eq!(Layout::from_attributes(&attrs), Ok(Some(l.clone())));
    let broken = |key: &str, value: Option<AttrValue>| {
        let mut a = attrs.clone();
        match value {
            Some(v) => a.insert(key.into(), v),
            None => a.remove(key),
        };
        match Layout::from_attributes(&a) {
            Err(LayoutError::Bad(why)) => why,
            other => panic!("{key} {other:?}"),
        }
    };
    assert!(broken(ORDER, Some(AttrValue::Int(2))).contains("order is 2"));
    assert!(broken(ELEMENT_SIZE, Some(AttrValue::Uint(17))).contains("is 17"));
    assert!(broken(ELEMENT_SIZE, Some(AttrValue::Uint(0))).contains("is 0"));
    assert!(broken(NDIMS, Some(AttrValue::Uint(2))).contains("gives 3 sizes"));
    assert!(broken(NDIMS, None).contains("ndims is missing"));
    assert!(broken(DIMS_SIZE, Some(AttrValue::Blob(vec![1, 2, 3]))).contains("3 bytes"));
    assert!(broken(DIMS_SIZE, Some(AttrValue::Str("4x5".into()))).contains("not a blob"));
    assert!(broken(ORDER, Some(AttrValue::Str("C".into()))).contains("not a number"));
    let huge = [u64::MAX, 2, 1]
        .iter()
        .flat_map(|d| d.to_le_bytes())
        .collect();
    assert!(broken(DIMS_SIZE, Some(AttrValue::Blob(huge))).contains("larger than memory"));
    let none = Layout {
        dims: Vec::new(),
        ..l.clone()
    };
    let mut a = Attributes::new();
    none.to_attributes(&mut a);
    assert!(
        matches!(Layout::from_attributes(&a), Err(LayoutError::Bad(w)) if w.contains("0 dimensions"))
    );
    let text = LayoutError::Bad("x".into()).to_string();
    assert!(
        text.contains("give .maestro.core.cdo.layout.order 0 or 1"),
        "{text}"
    );
}
