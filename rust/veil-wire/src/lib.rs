//! Veil's PostgreSQL wire server (`veil serve`).
//!
//! [`server::serve`] speaks the protocol through the pgwire crate (simple and
//! extended queries, SCRAM-SHA-256 or trust, TLS, cancel requests); an
//! [`engine::Engine`] behind it answers the SQL, a session per connection.
//! Results arrive from the engine as batches of text columns and leave as
//! `DataRow`s batch by batch, in text or binary per column as the client asks.

mod cancels;
pub mod engine;
mod handler;
mod rows;
pub mod server;
mod values;
