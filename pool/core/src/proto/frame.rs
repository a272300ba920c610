//! Frames on the control connections: `b"MSTR"`, the protocol [`VERSION`], a little-endian
//! `u32` payload length, then a postcard-encoded batch of messages. Decoding never panics
//! and never recurses as deep as the input nests; a malformed frame is a [`FrameError`]
//! saying what was wrong.

use serde::{Deserialize, Serialize, de::DeserializeOwned};

use super::{HEADER, Join, MAGIC, MAX_FRAME, VERSION};

/// Why a frame could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The frame does not start with `MSTR`.
    #[error("not a pool frame (bad magic {0:02x?}); is the peer a Maestro pool process?")]
    BadMagic([u8; 4]),
    /// Another protocol version.
    #[error(
        "protocol version {got}, this build speaks {VERSION}; run the same maestro version everywhere"
    )]
    Version {
        /// The peer's version.
        got: u8,
    },
    /// The announced payload exceeds [`MAX_FRAME`].
    #[error("frame of {0} bytes exceeds the {MAX_FRAME}-byte limit")]
    TooLarge(usize),
    /// The payload is not a valid message batch.
    #[error("malformed payload: {0}")]
    Payload(String),
}

/// Encodes a batch of messages as one frame.
///
/// # Errors
/// [`FrameError::TooLarge`] if the batch encodes to more than [`MAX_FRAME`] bytes.
pub fn encode<T: Serialize>(batch: &[T]) -> Result<Vec<u8>, FrameError> {
    let mut out = Vec::new();
    encode_into(batch, &mut out)?;
    Ok(out)
}

/// Appends a batch of messages to `out` as one frame, encoded in place (no buffer of its
/// own, no copy). `out` is as it was when it fails.
///
/// # Errors
/// [`FrameError::TooLarge`] if the batch encodes to more than [`MAX_FRAME`] bytes.
pub fn encode_into<T: Serialize>(batch: &[T], out: &mut Vec<u8>) -> Result<(), FrameError> {
    let start = out.len();
    out.extend_from_slice(&MAGIC);
    out.push(VERSION);
    out.extend_from_slice(&[0; 4]);
    if let Err(e) = postcard::serialize_with_flavor::<[T], _, _>(batch, Append(out)) {
        out.truncate(start);
        return Err(FrameError::Payload(e.to_string()));
    }
    let len = out.len() - start - HEADER;
    if len > MAX_FRAME {
        out.truncate(start);
        return Err(FrameError::TooLarge(len));
    }
    out[start + HEADER - 4..start + HEADER].copy_from_slice(&(len as u32).to_le_bytes());
    Ok(())
}

/// Postcard's output appended to a buffer.
struct Append<'a>(&'a mut Vec<u8>);

impl postcard::ser_flavors::Flavor for Append<'_> {
    type Output = ();

    fn try_push(&mut self, data: u8) -> postcard::Result<()> {
        self.0.push(data);
        Ok(())
    }

    fn try_extend(&mut self, data: &[u8]) -> postcard::Result<()> {
        self.0.extend_from_slice(data);
        Ok(())
    }

    fn finalize(self) -> postcard::Result<()> {
        Ok(())
    }
}

/// Appends a batch to `out` as as few frames as fit under [`MAX_FRAME`] (halving the batch
/// until each part fits).
///
/// # Errors
/// [`FrameError::TooLarge`] if a single message does not fit in a frame (the frames of
/// the messages before it stay in `out`).
pub fn encode_split_into<T: Serialize>(batch: &[T], out: &mut Vec<u8>) -> Result<(), FrameError> {
    match encode_into(batch, out) {
        Err(FrameError::TooLarge(_)) if batch.len() > 1 => {
            let (a, b) = batch.split_at(batch.len() / 2);
            encode_split_into(a, out)?;
            encode_split_into(b, out)
        }
        done => done,
    }
}

/// Reads the payload length from a frame header (the first [`HEADER`] bytes).
///
/// # Errors
/// Bad magic, version or size.
pub fn payload_len(header: &[u8; HEADER]) -> Result<usize, FrameError> {
    let magic = [header[0], header[1], header[2], header[3]];
    if magic != MAGIC {
        return Err(FrameError::BadMagic(magic));
    }
    if header[4] != VERSION {
        return Err(FrameError::Version { got: header[4] });
    }
    let len = u32::from_le_bytes([header[5], header[6], header[7], header[8]]) as usize;
    if len > MAX_FRAME {
        return Err(FrameError::TooLarge(len));
    }
    Ok(len)
}

/// Decodes a payload (the bytes after the header) into a batch.
///
/// # Errors
/// [`FrameError::Payload`] with postcard's reason.
pub fn decode<T: DeserializeOwned>(payload: &[u8]) -> Result<Vec<T>, FrameError> {
    postcard::from_bytes(payload).map_err(|e| FrameError::Payload(e.to_string()))
}

/// What an unjoined connection may send: its first frame holds exactly one [`super::ToPm::Join`].
/// Encoded as [`super::ToPm`] is (the variant index of `Join` is 0 in both), so decoding a first
/// frame as this type refuses every other message before any of its fields are read.
#[derive(Deserialize)]
enum FirstMessage {
    Join(Box<Join>),
}

/// Decodes the first frame's payload of a connection that has not joined: one
/// [`super::ToPm::Join`] and nothing else, so no other message type (and none of their nested
/// values) is ever decoded from a peer that has not proven the workflow secret.
///
/// # Errors
/// [`FrameError::Payload`] for anything but a lone, well-formed JOIN.
pub fn decode_join(payload: &[u8]) -> Result<Box<Join>, FrameError> {
    let batch = decode::<FirstMessage>(payload)
        .map_err(|e| FrameError::Payload(format!("the first frame must hold one JOIN ({e})")))?;
    match <[FirstMessage; 1]>::try_from(batch) {
        Ok([FirstMessage::Join(j)]) => Ok(j),
        Err(v) => Err(FrameError::Payload(format!(
            "the first frame must hold one JOIN, not {} messages",
            v.len()
        ))),
    }
}

/// Splits complete frames off the front of a byte stream buffer and hands each message they
/// hold to `each`, in order, with no batch allocated in between; leaves a partial frame in
/// `buf`. For drivers reading from sockets.
///
/// # Errors
/// The first bad frame (the connection should then be closed; messages before it in that
/// frame may have been handed over).
pub fn drain_frames<T: DeserializeOwned>(
    buf: &mut Vec<u8>,
    mut each: impl FnMut(T),
) -> Result<(), FrameError> {
    let mut at = 0;
    while buf.len() - at >= HEADER {
        let mut header = [0u8; HEADER];
        header.copy_from_slice(&buf[at..at + HEADER]);
        let len = payload_len(&header)?;
        if buf.len() - at - HEADER < len {
            break;
        }
        decode_each(&buf[at + HEADER..at + HEADER + len], &mut each)?;
        at += HEADER + len;
    }
    buf.drain(..at);
    Ok(())
}

/// Decodes a payload's batch message by message (postcard: a varint count, then the
/// messages), as [`decode`] does into a `Vec`.
fn decode_each<T: DeserializeOwned>(
    payload: &[u8],
    each: &mut impl FnMut(T),
) -> Result<(), FrameError> {
    let bad = |e: postcard::Error| FrameError::Payload(e.to_string());
    let (count, mut rest) = postcard::take_from_bytes::<u64>(payload).map_err(bad)?;
    for _ in 0..count {
        let (msg, after) = postcard::take_from_bytes::<T>(rest).map_err(bad)?;
        each(msg);
        rest = after;
    }
    Ok(())
}
