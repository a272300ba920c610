//! How a CDO's bytes reach a consumer: the endpoints and memory apps announce, what an offer
//! carries besides its region, and the [`Source`] a ticket names (same process, inline,
//! RMA or a copy from the provider's memory, stream).

use fabric_types::{Address, MemoryFile, RemoteRegion};
use serde::{Deserialize, Serialize};

use super::{AppId, CdoId};

/// An application's fabric endpoint, announced once in [`super::ToPm::Join`]: offers then carry
/// only their region, and the PM hands the endpoint to consumers in tickets.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FabricEndpoint {
    /// The libfabric provider name (a reader must use the same provider).
    pub provider: String,
    /// The endpoint's address.
    pub address: Address,
}

/// Where a same-host consumer may copy an app's offered bytes straight out of the app's
/// memory (Linux cross-memory attach, `process_vm_readv`): one copy by the consumer, no
/// work for the provider's progress. Announced in [`super::Join`] by apps whose offered regions'
/// addresses are virtual addresses (shared-memory providers); the PM passes it on in
/// [`Source::Rma`] when both apps are on one host and read over shared memory.
///
/// The consumer first reads `token` at `token_addr` in process `pid` and compares it: a
/// process id seen from another PID namespace, or reused after the app died, names a
/// process that does not hold the token, and the consumer reads over the fabric instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ProcessMemory {
    /// The app's process id.
    pub pid: u32,
    /// A random number the app keeps at `token_addr` for its lifetime.
    pub token: u64,
    /// Its address in the app's memory.
    pub token_addr: u64,
}

/// How a same-host consumer took a CDO's bytes straight from the provider's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Direct {
    /// Copied them (`process_vm_readv`).
    Copied,
    /// Mapped the provider's memory file: no copy at all.
    Mapped,
}

/// What an offer carries besides its region: the same bytes as registered with each of the
/// app's alternate endpoints, and the memory file holding them (which a consumer on the
/// app's host may map instead of copying, for apps that announce [`ProcessMemory`]).
/// Boxed behind a thin option: most offers have neither, and offers are the PM's hot path
/// (an empty one costs 8 bytes and no allocation).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OfferExtras(Option<Box<Extras>>);

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Extras {
    alternates: Vec<RemoteRegion>,
    file: Option<MemoryFile>,
    inline: Option<InlineBytes>,
    #[serde(default)]
    gfs: Option<GfsFile>,
    /// The region is not registered with the fabric (no RMA key): see
    /// [`OfferExtras::unregistered`].
    #[serde(default)]
    unregistered: bool,
}

/// A CDO's bytes written whole to a file on a global file system, and what a consumer
/// checks them by.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GfsFile {
    /// The file.
    pub path: std::sync::Arc<str>,
    /// XXH3-64 of the bytes ([`crate::attr::checksum`]): a file changed after its offer
    /// is told apart from the CDO, whatever its size.
    pub checksum: u64,
}

/// Longest path of a CDO's file on the global file system ([`Source::Gfs`]).
pub const MAX_GFS_PATH: usize = 4096;

/// A small CDO's bytes carried in its offer and in the tickets of its demands (see
/// [`Source::Inline`]), shared, not copied, between the PM's tickets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InlineBytes(pub std::sync::Arc<[u8]>);

impl InlineBytes {
    /// Their number.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Serialize for InlineBytes {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for InlineBytes {
    /// Straight from the frame into the shared allocation: one copy, not two (a `Vec`
    /// first would be copied again into the `Arc`).
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<InlineBytes, D::Error> {
        struct Bytes;
        impl<'v> serde::de::Visitor<'v> for Bytes {
            type Value = InlineBytes;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a CDO's bytes")
            }

            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<InlineBytes, E> {
                Ok(InlineBytes(v.into()))
            }

            fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<InlineBytes, E> {
                Ok(InlineBytes(v.into()))
            }

            fn visit_seq<A: serde::de::SeqAccess<'v>>(
                self,
                mut seq: A,
            ) -> Result<InlineBytes, A::Error> {
                // Formats that write bytes as a sequence (JSON: an array of numbers).
                let mut v = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 16));
                while let Some(b) = seq.next_element::<u8>()? {
                    v.push(b);
                }
                Ok(InlineBytes(v.into()))
            }
        }
        d.deserialize_bytes(Bytes)
    }
}

impl OfferExtras {
    /// The regions, in the order of the app's alternate endpoints, and the memory file.
    pub fn new(alternates: Vec<RemoteRegion>, file: Option<MemoryFile>) -> OfferExtras {
        let some = !alternates.is_empty() || file.is_some();
        OfferExtras(some.then(|| {
            Box::new(Extras {
                alternates,
                file,
                inline: None,
                gfs: None,
                unregistered: false,
            })
        }))
    }

    /// The same, carrying the CDO's bytes too (a small CDO: see [`Source::Inline`]).
    pub fn with_inline(mut self, bytes: impl Into<std::sync::Arc<[u8]>>) -> OfferExtras {
        self.0.get_or_insert_with(Box::default).inline = Some(InlineBytes(bytes.into()));
        self
    }

    /// The same, the CDO's bytes written whole to `file` on a global file system (a
    /// directory every consumer sees): consumers read it ([`Source::Gfs`]).
    pub fn with_gfs(mut self, file: GfsFile) -> OfferExtras {
        self.0.get_or_insert_with(Box::default).gfs = Some(file);
        self
    }

    /// The same, its region not registered with the fabric: the provider's address and
    /// the length, no RMA key (an offer whose bytes it carries, or kept as plain memory).
    /// Consumers on its host copy it out of the provider's memory (which needs no
    /// registration); others get its bytes with the ticket or by stream, never by RMA.
    pub fn with_unregistered(mut self) -> OfferExtras {
        self.0.get_or_insert_with(Box::default).unregistered = true;
        self
    }

    /// Whether the region is not registered with the fabric ([`OfferExtras::with_unregistered`]).
    pub fn unregistered(&self) -> bool {
        self.0.as_deref().is_some_and(|e| e.unregistered)
    }

    /// The file on the global file system holding the CDO's bytes, if the offer has one.
    pub fn gfs(&self) -> Option<&GfsFile> {
        self.0.as_deref().and_then(|e| e.gfs.as_ref())
    }

    /// The bytes the offer carries, if it does.
    pub fn inline(&self) -> Option<&InlineBytes> {
        self.0.as_deref().and_then(|e| e.inline.as_ref())
    }

    /// Takes the carried bytes out (the PM keeps them no longer).
    pub fn take_inline(&mut self) -> Option<InlineBytes> {
        self.0.as_deref_mut().and_then(|e| e.inline.take())
    }

    /// The regions for the alternate endpoints.
    pub fn alternates(&self) -> &[RemoteRegion] {
        self.0.as_deref().map_or(&[], |e| e.alternates.as_slice())
    }

    /// The memory file.
    pub fn file(&self) -> Option<MemoryFile> {
        self.0.as_deref().and_then(|e| e.file)
    }
}

/// What a same-host consumer needs to take an offer straight from the provider's memory:
/// the provider's process and, if the offer lives in one, its memory file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct HostMemory {
    /// The provider's process, to copy from.
    pub process: ProcessMemory,
    /// The offer's memory file, to map.
    pub file: Option<MemoryFile>,
    /// The offer is not registered with the fabric ([`OfferExtras::unregistered`]): a
    /// consumer that cannot copy (or map) it says so in its report instead of reading by
    /// RMA, and the PM sends it another way.
    pub copy_only: bool,
}

/// How a consumer gets a ticketed CDO's bytes; the PM chooses by locality (transport
/// planning): same process, then a common RMA provider (shm only within a node), else the
/// last-resort stream relayed over the control connections.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Source {
    /// Read `region` from the provider's `endpoint` with RMA.
    Rma {
        /// The provider's endpoint (shared with the PM's table: tickets are its hot path).
        endpoint: std::sync::Arc<FabricEndpoint>,
        /// The offered region (registered with that endpoint).
        region: RemoteRegion,
        /// Which of the consumer's endpoints reads: 0 its first (on its chosen NIC), `i`
        /// its alternate `i - 1` (another network).
        via: u8,
        /// Where the consumer may instead copy the bytes straight out of the provider's
        /// memory, or map them (same host, shared memory; `region.addr` is then the address
        /// in the provider's memory): see [`ProcessMemory`]. Boxed: tickets travel through the
        /// PM's queues by value.
        memory: Option<Box<HostMemory>>,
    },
    /// The provider is in this very process: take its buffer without a copy.
    SameProcess {
        /// The PM instance (see [`super::FromPm::Welcome`]).
        pool: u64,
        /// The providing app.
        app: AppId,
        /// The provider's CDO.
        cdo: CdoId,
        /// Its size.
        len: u64,
    },
    /// No common RMA provider: fetch `len` bytes in chunks with [`super::ToPm::Fetch`].
    Stream {
        /// The CDO's size.
        len: u64,
    },
    /// A small CDO: its bytes are here, in the ticket (the offer carried them to the PM).
    Inline {
        /// The bytes.
        bytes: InlineBytes,
    },
    /// The provider wrote the bytes to a file on a global file system: read `len` bytes
    /// from `file` (which must lie under the consumer's own GFS directory) and check them
    /// by its checksum.
    Gfs {
        /// The file.
        file: GfsFile,
        /// The CDO's size.
        len: u64,
    },
}

impl Source {
    /// The CDO's size in bytes.
    pub fn len(&self) -> u64 {
        match self {
            Source::Rma { region, .. } => region.len,
            Source::SameProcess { len, .. } | Source::Stream { len } | Source::Gfs { len, .. } => {
                *len
            }
            Source::Inline { bytes } => bytes.len() as u64,
        }
    }

    /// True for a 0-byte (synchronisation) CDO.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The transport's name, for logs and events.
    pub fn kind(&self) -> &'static str {
        match self {
            Source::Rma { .. } => "rma",
            Source::SameProcess { .. } => "same-process",
            Source::Stream { .. } => "stream",
            Source::Inline { .. } => "inline",
            Source::Gfs { .. } => "gfs",
        }
    }
}
