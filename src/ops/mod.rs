//! Operations: the [`admin`] listener (status page with the [`history`] of the last
//! minutes, `/check`, per-origin views, `/metrics`) and the key [`directory`] listener. Uses [`crate::enforce`] and the
//! layers below it.
//!
//! **Its other files:** `check.rs` (`/check?url=…`: the decision a request would get,
//! explained), `statement.rs` (the crawler's published statement: `/statement.json`,
//! `.html`, `.atom`, and `robotsgate statement`).

pub mod admin;
mod check;
pub mod directory;
pub mod history;
pub mod statement;
