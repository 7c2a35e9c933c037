//! Operations: the [`admin`] listener (status page, `/check`, per-origin views,
//! `/metrics`). Uses [`crate::enforce`] and the layers below it.

pub mod admin;
