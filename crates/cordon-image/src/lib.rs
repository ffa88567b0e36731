//! cordon's OCI image store.
//!
//! Images come in by [`pull`](crate::pull) from a registry (v2 API) or by
//! [`import`](crate::import) of a `docker save` / `podman save` archive, an oci-archive or an
//! OCI layout directory, and live in a content-addressed [`Store`](crate::store::Store) under
//! `<data-dir>/images`; [`build`](crate::build) makes images from Dockerfiles and
//! [`commit`](crate::commit) from what a sandbox changed.
//!
//! ## Layers are unpacked one directory each, and stacked by overlayfs
//!
//! Each layer is unpacked once into its own directory, keyed by its uncompressed digest
//! (`diff_id`), and shared by every image (and every sandbox) that has it; a sandbox's root is
//! an overlay of an image's layer directories ([`store::ImageRoot::lower_dirs`], top first)
//! under its own writable layer. The alternative, flattening each image into one directory at
//! unpack time, needs no whiteout representation and never meets overlayfs' limits, but gives
//! up exactly the sharing that makes images cheap: `python:3.12-slim` and every image built
//! on it would each carry their own copy of Debian. What per-layer costs, and why it is
//! acceptable here:
//! - Whiteouts must be stored in a form overlayfs reads from a lower layer: the xattr form
//!   (`user.overlay.whiteout`, Linux 6.7+), which any user can write, instead of `0/0`
//!   character devices, which an unprivileged unpacker cannot create. See [`unpack`].
//! - The classic `lowerdir=a:b:c` option string is limited to one page (4096 bytes): about 40
//!   layers at the store's path lengths. Linux 6.8+ takes each layer separately
//!   (`fsconfig(FSCONFIG_SET_STRING, "lowerdir+", dir)`), which has no such limit; overlayfs
//!   itself stacks at most 500 layers, more than any builder produces (Docker stops at 127).
//! - The overlay must be mounted with `userxattr` (it is, inside a user namespace: that is the
//!   only way there) for it to read the `user.overlay.*` xattrs.

mod add;
pub mod auth;
pub mod build;
pub mod commit;
pub mod digest;
pub mod dockerfile;
pub mod error;
mod fsutil;
pub mod import;
pub mod oci;
pub mod pull;
pub mod push;
pub mod reference;
pub mod store;
pub mod unpack;
pub mod user;

pub use add::{Event, Progress, Quiet};
pub use digest::Digest;
pub use error::ImageError;
pub use fsutil::FileLock;
pub use import::{import, ImportOptions, Imported};
pub use oci::{ImageConfig, Platform};
pub use pull::{login, pull, PullOptions, Pulled};
pub use reference::Reference;
pub use store::{ImageRoot, Store};
