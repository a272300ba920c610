//! Data layouts of dense arrays and the transformation between them (Maestro's `mamba`
//! layouts): a CDO's bytes are an array of `dims` (logical order, dimension 0 first) of
//! `element_size`-byte elements, stored row-major (the last index varies fastest, as C
//! stores arrays) or column-major (the first index varies fastest, as Fortran does). A
//! consumer that declares the same array in the other order gets its own order.
//!
//! The layout is read from a CDO's attributes ([`Layout::from_attributes`]:
//! `.maestro.core.cdo.layout.order`, `.element-size`, `.ndims`, `.dims-size`). Changing the
//! order reverses the axes; it is done as one cache-blocked 2-D transpose per dimension
//! after the first (one pass for a matrix), so any number of dimensions and element sizes
//! of 1 to 16 bytes are moved with fixed-size copies. Pure: no IO.

use std::fmt;

use crate::attr::{AttrValue, Attributes};

/// `.maestro.core.cdo.layout.order`: 0 row-major, 1 column-major.
pub const ORDER: &str = crate::attr::LAYOUT_ORDER;
/// `.maestro.core.cdo.layout.element-size`: bytes per element.
pub const ELEMENT_SIZE: &str = ".maestro.core.cdo.layout.element-size";
/// `.maestro.core.cdo.layout.ndims`: the number of dimensions.
pub const NDIMS: &str = ".maestro.core.cdo.layout.ndims";
/// `.maestro.core.cdo.layout.dims-size`: each dimension's size, little-endian u64 each.
pub const DIMS_SIZE: &str = ".maestro.core.cdo.layout.dims-size";

/// Largest element size transformed (Maestro's: complex double).
pub const MAX_ELEMENT_SIZE: usize = 16;
/// Most dimensions.
pub const MAX_DIMS: usize = 32;

/// How an array's elements follow each other in memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// The last index varies fastest (C).
    RowMajor,
    /// The first index varies fastest (Fortran).
    ColumnMajor,
}

/// A dense array's layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Row- or column-major.
    pub order: Order,
    /// Bytes per element, 1 to [`MAX_ELEMENT_SIZE`].
    pub element_size: usize,
    /// Each dimension's size, dimension 0 first (the same in both orders).
    pub dims: Vec<u64>,
}

/// What is wrong with a layout, or between two.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LayoutError {
    /// The attributes describe a layout badly.
    #[error(
        "bad layout attributes: {0} (give {ORDER} 0 or 1, {ELEMENT_SIZE} 1-{MAX_ELEMENT_SIZE}, {NDIMS} and {DIMS_SIZE} with that many sizes)"
    )]
    Bad(String),
    /// The two layouts are not the same array.
    #[error(
        "the producer's layout ({from}) and the consumer's ({to}) are not the same array: {why}; declare the same element size and dimensions, in either order"
    )]
    Mismatch {
        /// The producer's layout.
        from: String,
        /// The consumer's layout.
        to: String,
        /// What differs.
        why: String,
    },
    /// The bytes are not the size the layout says.
    #[error("{layout} is {expected} bytes, the CDO has {got}")]
    Size {
        /// The layout.
        layout: String,
        /// Its bytes.
        expected: u64,
        /// The CDO's bytes.
        got: u64,
    },
}

impl fmt::Display for Layout {
    /// `row-major 2x3 of 4-byte elements`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let order = match self.order {
            Order::RowMajor => "row-major",
            Order::ColumnMajor => "column-major",
        };
        let dims: Vec<String> = self.dims.iter().map(u64::to_string).collect();
        write!(
            f,
            "{order} {} of {}-byte elements",
            dims.join("x"),
            self.element_size
        )
    }
}

impl Layout {
    /// The layout `attributes` describe; `None` when they set no layout key at all.
    ///
    /// # Errors
    /// [`LayoutError::Bad`]: a key missing or of the wrong type, an order other than 0/1,
    /// an element size of 0 or above [`MAX_ELEMENT_SIZE`], `ndims` not the number of sizes
    /// given, no dimension or more than [`MAX_DIMS`], or sizes whose product overflows.
    pub fn from_attributes(attributes: &Attributes) -> Result<Option<Layout>, LayoutError> {
        let keys = [ORDER, ELEMENT_SIZE, NDIMS, DIMS_SIZE];
        if !keys.iter().any(|k| attributes.contains_key(*k)) {
            return Ok(None);
        }
        let bad = |s: String| LayoutError::Bad(s);
        let number = |key: &str| -> Result<u64, LayoutError> {
            match attributes.get(key) {
                Some(AttrValue::Uint(v)) => Ok(*v),
                Some(AttrValue::Int(v)) => {
                    u64::try_from(*v).map_err(|_| bad(format!("{key} is {v}")))
                }
                Some(other) => Err(bad(format!("{key} is {other}, not a number"))),
                None => Err(bad(format!("{key} is missing"))),
            }
        };
        let order = match number(ORDER)? {
            0 => Order::RowMajor,
            1 => Order::ColumnMajor,
            o => return Err(bad(format!("{ORDER} is {o}"))),
        };
        let element_size = number(ELEMENT_SIZE)?;
        if element_size == 0 || element_size > MAX_ELEMENT_SIZE as u64 {
            return Err(bad(format!("{ELEMENT_SIZE} is {element_size}")));
        }
        let ndims = number(NDIMS)?;
        let dims: Vec<u64> = match attributes.get(DIMS_SIZE) {
            Some(AttrValue::Blob(b)) if b.len().is_multiple_of(8) => b
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                .collect(),
            Some(AttrValue::Blob(b)) => {
                return Err(bad(format!(
                    "{DIMS_SIZE} has {} bytes, not 8 per dimension",
                    b.len()
                )));
            }
            Some(other) => return Err(bad(format!("{DIMS_SIZE} is {other}, not a blob"))),
            None => return Err(bad(format!("{DIMS_SIZE} is missing"))),
        };
        if dims.len() as u64 != ndims {
            return Err(bad(format!(
                "{NDIMS} is {ndims} but {DIMS_SIZE} gives {} sizes",
                dims.len()
            )));
        }
        if dims.is_empty() || dims.len() > MAX_DIMS {
            return Err(bad(format!("{} dimensions", dims.len())));
        }
        let layout = Layout {
            order,
            element_size: element_size as usize,
            dims,
        };
        if layout.bytes().is_none() {
            return Err(bad(format!("{layout} is larger than memory can be")));
        }
        Ok(Some(layout))
    }

    /// Sets the layout keys of `attributes` to this layout.
    pub fn to_attributes(&self, attributes: &mut Attributes) {
        let order = match self.order {
            Order::RowMajor => 0,
            Order::ColumnMajor => 1,
        };
        attributes.insert(ORDER.into(), AttrValue::Int(order));
        attributes.insert(
            ELEMENT_SIZE.into(),
            AttrValue::Uint(self.element_size as u64),
        );
        attributes.insert(NDIMS.into(), AttrValue::Uint(self.dims.len() as u64));
        let blob = self.dims.iter().flat_map(|d| d.to_le_bytes()).collect();
        attributes.insert(DIMS_SIZE.into(), AttrValue::Blob(blob));
    }

    /// The array's bytes; `None` if they overflow.
    pub fn bytes(&self) -> Option<u64> {
        self.dims
            .iter()
            .try_fold(self.element_size as u64, |acc, &d| acc.checked_mul(d))
    }
}

/// `src`, an array of layout `from`, written into `dst` in layout `to` (the same array:
/// same element size and dimensions; the same order is a plain copy).
///
/// # Errors
/// [`LayoutError::Mismatch`] naming both layouts when the element size or the dimensions
/// differ; [`LayoutError::Size`] when `src` or `dst` is not the array's size.
pub fn transform(
    src: &[u8],
    from: &Layout,
    to: &Layout,
    dst: &mut [u8],
) -> Result<(), LayoutError> {
    check(from, to)?;
    let bytes = from.bytes().unwrap_or(u64::MAX);
    for (what, len) in [(from, src.len()), (to, dst.len())] {
        if len as u64 != bytes {
            return Err(LayoutError::Size {
                layout: what.to_string(),
                expected: bytes,
                got: len as u64,
            });
        }
    }
    if from.order == to.order {
        dst.copy_from_slice(src);
        return Ok(());
    }
    // Both orders store the axes reversed of each other: as the row-major array of the
    // dims in storage order (slowest first), the source is transposed into the reverse.
    let storage: Vec<usize> = match from.order {
        Order::RowMajor => from.dims.iter().map(|&d| d as usize).collect(),
        Order::ColumnMajor => from.dims.iter().rev().map(|&d| d as usize).collect(),
    };
    reverse_axes(src, dst, &storage, from.element_size);
    Ok(())
}

/// Whether `from` and `to` are the same array.
fn check(from: &Layout, to: &Layout) -> Result<(), LayoutError> {
    let why = if from.element_size != to.element_size {
        format!(
            "elements of {} and {} bytes",
            from.element_size, to.element_size
        )
    } else if from.dims != to.dims {
        format!(
            "dimensions {:?} and {:?} (sizes in logical order, dimension 0 first, in both orders)",
            from.dims, to.dims
        )
    } else {
        return Ok(());
    };
    Err(LayoutError::Mismatch {
        from: from.to_string(),
        to: to.to_string(),
        why,
    })
}

/// `src`, the row-major array of `dims` (`elem`-byte elements), written to `dst` as the
/// row-major array of the reversed dims. Pass `i` transposes `dims[i] x (dims[i+1] * ...)`
/// with the blocks the passes before made as elements: after pass 0 the array is
/// `d1, ..., dk, d0`, after the last `dk, ..., d0`. The passes alternate between `dst` and
/// one scratch buffer, the last landing in `dst`.
fn reverse_axes(src: &[u8], dst: &mut [u8], dims: &[usize], elem: usize) {
    let passes = dims.len().saturating_sub(1);
    if passes == 0 {
        dst.copy_from_slice(src);
        return;
    }
    let mut scratch = if passes > 1 {
        vec![0u8; src.len()]
    } else {
        Vec::new()
    };
    let mut elem = elem;
    for i in 0..passes {
        let (rows, cols) = (dims[i], dims[i + 1..].iter().product());
        let into_dst = (passes - 1 - i).is_multiple_of(2);
        match (i, into_dst) {
            (0, true) => transpose(src, dst, rows, cols, elem),
            (0, false) => transpose(src, &mut scratch, rows, cols, elem),
            (_, true) => transpose(&scratch, dst, rows, cols, elem),
            (_, false) => transpose(dst, &mut scratch, rows, cols, elem),
        }
        elem *= rows;
    }
}

/// Edge of the square blocks the transpose moves at a time (elements).
const BLOCK: usize = 32;

/// `src`, `rows x cols` row-major of `elem`-byte elements, into `dst` as `cols x rows`.
fn transpose(src: &[u8], dst: &mut [u8], rows: usize, cols: usize, elem: usize) {
    match elem {
        1 => transpose_fixed::<1>(src, dst, rows, cols),
        2 => transpose_fixed::<2>(src, dst, rows, cols),
        4 => transpose_fixed::<4>(src, dst, rows, cols),
        8 => transpose_fixed::<8>(src, dst, rows, cols),
        16 => transpose_fixed::<16>(src, dst, rows, cols),
        _ => transpose_any(src, dst, rows, cols, elem),
    }
}

fn transpose_fixed<const E: usize>(src: &[u8], dst: &mut [u8], rows: usize, cols: usize) {
    let n = rows * cols * E;
    assert!(
        src.len() >= n && dst.len() >= n,
        "a transpose within its buffers"
    );
    let (from, to) = (src.as_ptr(), dst.as_mut_ptr());
    // Each destination row (a source column) is written contiguously within a block; the
    // source is read a cache line per row of the block.
    for c0 in (0..cols).step_by(BLOCK) {
        for r0 in (0..rows).step_by(BLOCK) {
            let (r1, c1) = ((r0 + BLOCK).min(rows), (c0 + BLOCK).min(cols));
            for c in c0..c1 {
                for r in r0..r1 {
                    // SAFETY: r < rows and c < cols, so both element offsets plus E are
                    // within the n bytes both buffers have (checked above); elements are
                    // read and written unaligned.
                    unsafe {
                        let e = from
                            .add((r * cols + c) * E)
                            .cast::<[u8; E]>()
                            .read_unaligned();
                        to.add((c * rows + r) * E)
                            .cast::<[u8; E]>()
                            .write_unaligned(e);
                    }
                }
            }
        }
    }
}

fn transpose_any(src: &[u8], dst: &mut [u8], rows: usize, cols: usize, elem: usize) {
    let block = (BLOCK * 8 / elem).clamp(1, BLOCK);
    for r0 in (0..rows).step_by(block) {
        for c0 in (0..cols).step_by(block) {
            for r in r0..(r0 + block).min(rows) {
                for c in c0..(c0 + block).min(cols) {
                    let (s, d) = ((r * cols + c) * elem, (c * rows + r) * elem);
                    dst[d..d + elem].copy_from_slice(&src[s..s + elem]);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
