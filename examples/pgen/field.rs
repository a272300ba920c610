//! The forecast's fields, as every job of pgen agrees on them: which there are
//! ([`Shape`]), their names, sizes, bytes and attributes ([`Field`]), and the checksum
//! their attributes carry.

use clap::Args;
use fabric::Buffer;
use pool::attr::{AttrValue, Attributes};

use crate::Error;

/// Parameters of the fields, in order (`--params` takes the first ones).
const PARAMS: [&str; 8] = ["2t", "msl", "10u", "10v", "tp", "q", "z", "t"];

/// What every job of the workflow agrees on: which fields there are and their sizes.
#[derive(Args, Clone, Copy)]
pub struct Shape {
    /// Forecast steps (at least 1).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    pub steps: u32,
    /// Parameters per step (at most 8).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=8))]
    pub params: u32,
    /// Levels per parameter (at least 1).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    pub levels: u32,
    /// Smallest field, in bytes.
    #[arg(long, default_value_t = 1 << 20)]
    pub min_size: usize,
    /// Largest field, in bytes.
    #[arg(long, default_value_t = 16 << 20)]
    pub max_size: usize,
}

/// One field of the forecast.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    pub step: u32,
    pub param: &'static str,
    pub level: u32,
}

impl Shape {
    /// Checks what the options cannot check one by one.
    ///
    /// # Errors
    /// A smallest field larger than the largest.
    pub fn check(&self) -> Result<(), Error> {
        if self.min_size > self.max_size {
            return Err(format!(
                "--min-size {} is larger than --max-size {}: give the smallest field's size first",
                self.min_size, self.max_size
            )
            .into());
        }
        Ok(())
    }

    pub fn fields(&self, step: u32) -> impl Iterator<Item = Field> + '_ {
        PARAMS[..self.params as usize]
            .iter()
            .flat_map(move |&param| (0..self.levels).map(move |level| Field { step, param, level }))
    }

    pub fn per_step(&self) -> usize {
        (self.params * self.levels) as usize
    }

    pub fn all(&self) -> impl Iterator<Item = Field> + '_ {
        (0..self.steps).flat_map(|s| self.fields(s))
    }

    pub fn size(&self, f: &Field) -> usize {
        let span = self.max_size.saturating_sub(self.min_size) as u64 + 1;
        self.min_size + (checksum(f.name().as_bytes()) % span) as usize
    }

    /// The arguments that give another job this shape.
    pub fn args(&self) -> Vec<String> {
        [
            ("--steps", self.steps.to_string()),
            ("--params", self.params.to_string()),
            ("--levels", self.levels.to_string()),
            ("--min-size", self.min_size.to_string()),
            ("--max-size", self.max_size.to_string()),
        ]
        .into_iter()
        .flat_map(|(k, v)| [k.to_string(), v])
        .collect()
    }
}

impl Field {
    pub fn name(&self) -> String {
        format!("pgen/field/s{}/{}/l{}", self.step, self.param, self.level)
    }

    pub fn attributes(&self, source: &str, sum: u64) -> Attributes {
        Attributes::from([
            (".user.pgen.kind".into(), AttrValue::Str("field".into())),
            (".user.pgen.source".into(), AttrValue::Str(source.into())),
            (
                ".user.pgen.step".into(),
                AttrValue::Int(i64::from(self.step)),
            ),
            (".user.pgen.param".into(), AttrValue::Str(self.param.into())),
            (
                ".user.pgen.level".into(),
                AttrValue::Int(i64::from(self.level)),
            ),
            (".user.pgen.checksum".into(), AttrValue::Uint(sum)),
        ])
    }

    /// Byte `i` of this field as the forecast computes it (a pattern seeded by the low
    /// byte of the name's FNV-1a, as `examples/c/common.h`'s `fill`).
    pub fn byte(seed: u8, i: usize) -> u8 {
        (i as u8).wrapping_mul(29).wrapping_add(seed) ^ ((i >> 8) as u8)
    }

    pub fn seed(&self) -> u8 {
        checksum(self.name().as_bytes()) as u8
    }

    /// The forecast's bytes of this field.
    pub fn compute(&self, shape: &Shape) -> Result<Buffer, Error> {
        let mut buf = Buffer::for_offer(shape.size(self))?;
        let seed = self.seed();
        for (i, b) in buf.as_mut_slice().iter_mut().enumerate() {
            *b = Field::byte(seed, i);
        }
        Ok(buf)
    }

    /// Whether `data` is this field as the forecast computed it (its size, then every
    /// byte).
    pub fn check(&self, shape: &Shape, data: &[u8]) -> Result<(), Error> {
        let (size, seed) = (shape.size(self), self.seed());
        let wrong = (data.len() != size)
            .then_some(size.min(data.len()))
            .or_else(|| {
                data.iter()
                    .enumerate()
                    .position(|(i, &b)| b != Field::byte(seed, i))
            });
        match wrong {
            None => Ok(()),
            Some(at) => Err(format!(
                "{}: {} bytes with checksum {:#x}, not the forecast's {size} bytes (they differ from byte {at})",
                self.name(),
                data.len(),
                checksum(data),
            )
            .into()),
        }
    }

    /// The product line of this field: what product generation derives from it.
    pub fn product_line(&self, data: &[u8]) -> String {
        let mean = data.iter().map(|&b| f64::from(b)).sum::<f64>() / data.len().max(1) as f64;
        format!(
            "{} l{} {} bytes checksum {:016x} mean {mean:.4}",
            self.param,
            self.level,
            data.len(),
            checksum(data)
        )
    }
}

const FNV: (u64, u64) = (0xcbf2_9ce4_8422_2325, 0x0100_0000_01b3);

/// FNV-1a of `bytes`.
pub fn checksum(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(FNV.0, |h, &b| (h ^ u64::from(b)).wrapping_mul(FNV.1))
}

/// The field `name` stands for, if it is one of `shape`'s.
pub fn field_of(shape: &Shape, name: &str) -> Option<Field> {
    shape.all().find(|f| f.name() == name)
}
