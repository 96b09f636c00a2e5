//! pgwire's query handlers over an [`Engine`]: one engine session per connection.

use std::cell::Cell;
use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::sink::{Sink, SinkExt};
use futures::stream::{self, BoxStream, StreamExt};
use pgwire::api::copy::CopyHandler;
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::{send_describe_response, ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::results::{
    CopyResponse, DescribePortalResponse, DescribeStatementResponse, FieldFormat, FieldInfo,
    QueryResponse, Response, Tag,
};
use pgwire::api::stmt::{NoopQueryParser, StoredStatement};
use pgwire::api::store::{Entry, PortalStore};
use pgwire::api::{
    ClientInfo, ClientPortalStore, Type, DEFAULT_NAME, METADATA_DATABASE, METADATA_USER,
};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::copy::{CopyData, CopyDone, CopyFail};
use pgwire::messages::data::DataRow;
use pgwire::messages::extendedquery::{Describe, Execute, TARGET_TYPE_BYTE_PORTAL};
use pgwire::messages::response::TransactionStatus;
use pgwire::messages::simplequery::Query;
use pgwire::messages::startup::ParameterStatus;
use pgwire::messages::PgWireBackendMessage;
use tokio::sync::OnceCell;

use crate::cancels::{Cancels, Running};
use crate::engine::{
    Batch, Batches, Engine, Field, Oid, Outcome, Param, ReadyBatches, Session, WireError,
};
use crate::rows::{encode_batch, Layout};
use crate::values::binary_to_text;

thread_local! {
    /// Whether this thread is a connection's own (`run_inline`): engine work runs on it.
    static INLINE: Cell<bool> = const { Cell::new(false) };
}

/// This thread serves one connection alone: engine work runs here, not on tokio's
/// blocking pool (a trip there and back cost each statement two thread wake-ups).
pub fn run_inline() {
    INLINE.with(|inline| inline.set(true));
}

fn inline() -> bool {
    INLINE.with(Cell::get)
}

/// The connection's engine session, opened on its first statement, and how a cancel
/// request reaches it.
#[derive(Default)]
struct Slot(OnceCell<(Arc<dyn Session>, Arc<Running>)>);

pub struct Handler {
    engine: Arc<dyn Engine>,
    parser: Arc<NoopQueryParser>,
    pub cancels: Arc<Cancels>,
}

impl Handler {
    pub fn new(engine: Arc<dyn Engine>) -> Self {
        Handler {
            engine,
            parser: Arc::new(NoopQueryParser::new()),
            cancels: Arc::new(Cancels::default()),
        }
    }

    async fn session<C: ClientInfo>(&self, client: &C) -> PgWireResult<Arc<dyn Session>> {
        self.running(client).await.map(|(session, _)| session)
    }

    async fn running<C: ClientInfo>(
        &self,
        client: &C,
    ) -> PgWireResult<(Arc<dyn Session>, Arc<Running>)> {
        let slot = client
            .session_extensions()
            .get_or_insert_with(Slot::default);
        let meta = client.metadata();
        let user = meta.get(METADATA_USER).cloned().unwrap_or_default();
        let database = meta.get(METADATA_DATABASE).cloned().unwrap_or_default();
        let (pid, key) = client.pid_and_secret_key();
        let (engine, cancels) = (self.engine.clone(), self.cancels.clone());
        slot.0
            .get_or_try_init(|| async move {
                let session: Arc<dyn Session> =
                    blocking(move || engine.open(&user, &database).map(Arc::from)).await?;
                let running = cancels.register(pid, key.to_bytes(), &session);
                Ok((session, running))
            })
            .await
            .cloned()
    }
}

/// Cancels the session's running statement if dropped armed: pgwire drops a
/// statement's future when a cancel request arrives, and the engine work on
/// the blocking pool must then be told to stop.
struct Interrupt(Option<Arc<dyn Session>>);

impl Interrupt {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for Interrupt {
    fn drop(&mut self) {
        if let Some(session) = self.0.take() {
            // the engine may need locks the running statement holds: not on this task
            std::thread::spawn(move || session.cancel());
        }
    }
}

/// `session.run(sql, params)`, interrupted if cancelled: on the blocking pool, by
/// dropping its future (pgwire's way); inline, by a cancel request reaching the
/// session (`cancels`), after which its failure is the cancellation.
async fn run_cancellable(
    (session, running): (Arc<dyn Session>, Arc<Running>),
    sql: String,
    params: Vec<Param>,
) -> PgWireResult<Vec<Outcome>> {
    running.start();
    let interrupt = Interrupt(Some(session.clone()));
    let outcomes = blocking(move || session.run(&sql, &params)).await;
    interrupt.disarm();
    if outcomes.is_err() && running.requested() {
        return Err(PgWireError::QueryCanceled);
    }
    outcomes
}

/// Rows of a ready result (`Batches::take_ready`) encoded on the connection's own task;
/// more go through the blocking pool, batch by batch, as any result.
const READY_ROWS: usize = 1024;

/// Run engine work on tokio's blocking pool.
pub async fn blocking<T, F>(work: F) -> PgWireResult<T>
where
    F: FnOnce() -> Result<T, WireError> + Send + 'static,
    T: Send + 'static,
{
    if inline() {
        return work().map_err(user_error);
    }
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => result.map_err(user_error),
        Err(join) => Err(user_error(WireError::internal(format!(
            "the statement's worker failed: {join}"
        )))),
    }
}

pub fn user_error(err: WireError) -> PgWireError {
    let mut info = ErrorInfo::new("ERROR".to_owned(), err.code, err.message);
    info.hint = err.hint;
    info.position = err.position.map(|p| p.to_string());
    PgWireError::UserError(Box::new(info))
}

fn field_infos(fields: &[Field], format: &Format) -> Vec<FieldInfo> {
    fields
        .iter()
        .enumerate()
        .map(|(i, f)| {
            FieldInfo::new(
                f.name.clone(),
                None,
                None,
                Type::from_oid(f.oid).unwrap_or(Type::TEXT),
                format.format_for(i),
            )
        })
        .collect()
}

/// The messages made of `batches`, one batch at a time on the blocking pool
/// (`encode` turns a batch into its messages there too).
fn batch_stream<T, F>(
    mut batches: Box<dyn Batches>,
    encode: F,
) -> BoxStream<'static, PgWireResult<T>>
where
    T: Send + 'static,
    F: Fn(&Batch) -> Result<Vec<T>, WireError> + Send + Sync + 'static,
{
    if let Some(ready) = batches.take_ready() {
        if ready.iter().map(|b| b.rows).sum::<usize>() <= READY_ROWS {
            // a few rows made whole (a point query's): encoded here, where a trip to the
            // blocking pool per batch and one more for the end cost more than the rows
            let mut messages = Vec::new();
            for batch in &ready {
                match encode(batch) {
                    Ok(encoded) => messages.extend(encoded.into_iter().map(Ok)),
                    Err(err) => {
                        messages.push(Err(user_error(err)));
                        break;
                    }
                }
            }
            return stream::iter(messages).boxed();
        }
        batches = Box::new(ReadyBatches::new(ready));
    }
    let encode = Arc::new(encode);
    stream::unfold(Some(batches), move |state| {
        let encode = encode.clone();
        async move {
            let mut batches = state?;
            let step = move || {
                let messages = match batches.next_batch() {
                    Ok(Some(batch)) => encode(&batch).map(Some),
                    Ok(None) => Ok(None),
                    Err(err) => Err(err),
                };
                (batches, messages)
            };
            let next = if inline() {
                Ok(step())
            } else {
                tokio::task::spawn_blocking(step).await
            };
            match next {
                Ok((batches, Ok(Some(messages)))) => Some((
                    stream::iter(messages.into_iter().map(Ok)).boxed(),
                    Some(batches),
                )),
                Ok((_, Ok(None))) => None,
                Ok((_, Err(err))) => Some((stream::iter([Err(user_error(err))]).boxed(), None)),
                Err(join) => Some((
                    stream::iter([Err(user_error(WireError::internal(join.to_string())))]).boxed(),
                    None,
                )),
            }
        }
    })
    .flatten()
    .boxed()
}

/// The rows of `batches` as `DataRow`s in each column's format.
fn row_stream(
    batches: Box<dyn Batches>,
    layout: Arc<Vec<Layout>>,
) -> BoxStream<'static, PgWireResult<DataRow>> {
    batch_stream(batches, move |batch| encode_batch(batch, &layout))
}

/// COPY TO's CopyData messages: one per line, as PostgreSQL sends them.
fn copy_stream(batches: Box<dyn Batches>) -> BoxStream<'static, PgWireResult<CopyData>> {
    batch_stream(batches, |batch| {
        let column = &batch.columns[0];
        Ok((0..batch.rows)
            .map(|row| CopyData::new(Bytes::copy_from_slice(column.value(row).unwrap_or(b""))))
            .collect())
    })
}

fn response(outcome: Outcome, format: &Format) -> Response {
    match outcome {
        Outcome::Rows {
            fields,
            batches,
            tag,
        } => {
            let infos = field_infos(&fields, format);
            let layout: Vec<Layout> = infos
                .iter()
                .zip(&fields)
                .map(|(info, f)| Layout {
                    oid: f.oid,
                    binary: info.format() == FieldFormat::Binary,
                })
                .collect();
            let mut response =
                QueryResponse::new(Arc::new(infos), row_stream(batches, Arc::new(layout)));
            if let Some(tag) = tag {
                response.set_command_tag(&tag);
            }
            Response::Query(response)
        }
        Outcome::Command { tag, rows, .. } => {
            // ROLLBACK TO SAVEPOINT: PostgreSQL's tag is ROLLBACK, but the transaction goes on
            let within = tag == "ROLLBACK TO";
            let mut done = Tag::new(if within { "ROLLBACK" } else { &tag });
            if tag == "INSERT" {
                done = done.with_oid(0); // "INSERT 0 n", as PostgreSQL says it
            }
            if let Some(n) = rows {
                done = done.with_rows(n);
            }
            match tag.as_str() {
                _ if within => Response::Execution(done),
                "BEGIN" | "START TRANSACTION" => Response::TransactionStart(done),
                "COMMIT" | "ROLLBACK" | "END" => Response::TransactionEnd(done),
                _ => Response::Execution(done),
            }
        }
        Outcome::CopyIn { columns } => Response::CopyIn(CopyResponse::new(
            0,
            columns,
            stream::empty::<PgWireResult<CopyData>>(),
        )),
        Outcome::CopyOut { columns, batches } => {
            Response::CopyOut(CopyResponse::new(0, columns, copy_stream(batches)))
        }
        Outcome::Empty => Response::EmptyQuery,
    }
}

/// The rows of a pending `COPY ... FROM STDIN`, gathered until CopyDone.
#[derive(Default)]
struct CopyBuffer(std::sync::Mutex<Vec<u8>>);

#[async_trait]
impl CopyHandler for Handler {
    async fn on_copy_data<C>(&self, client: &mut C, copy_data: CopyData) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let buffer = client
            .session_extensions()
            .get_or_insert_with(CopyBuffer::default);
        buffer.0.lock().unwrap().extend_from_slice(&copy_data.data);
        Ok(())
    }

    async fn on_copy_done<C>(&self, client: &mut C, _done: CopyDone) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let buffer = client
            .session_extensions()
            .get_or_insert_with(CopyBuffer::default);
        let data = std::mem::take(&mut *buffer.0.lock().unwrap());
        let session = self.session(client).await?;
        let rows = blocking(move || session.copy_in(data)).await?;
        let tag = Tag::new("COPY").with_rows(rows);
        client
            .send(PgWireBackendMessage::CommandComplete(tag.into()))
            .await?;
        Ok(())
    }

    async fn on_copy_fail<C>(&self, client: &mut C, fail: CopyFail) -> PgWireError
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let buffer = client
            .session_extensions()
            .get_or_insert_with(CopyBuffer::default);
        buffer.0.lock().unwrap().clear();
        if let Ok(session) = self.session(client).await {
            let _ = blocking(move || {
                session.copy_abort();
                Ok(())
            })
            .await;
        }
        user_error(WireError::new(
            "57014",
            format!("COPY from stdin failed: {}", fail.message),
        ))
    }
}

/// The reported parameters the outcomes changed.
fn changed_status(outcomes: &[Outcome]) -> Vec<(String, String)> {
    outcomes
        .iter()
        .flat_map(|outcome| match outcome {
            Outcome::Command { status, .. } => status.clone(),
            _ => Vec::new(),
        })
        .collect()
}

/// A `ParameterStatus` for each reported parameter the outcomes changed
/// (`SET TimeZone`), as PostgreSQL reports them before the next ReadyForQuery.
async fn report_status<C>(client: &mut C, changed: Vec<(String, String)>) -> PgWireResult<()>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    for (name, value) in changed {
        let message = ParameterStatus::new(name, value);
        client
            .send(PgWireBackendMessage::ParameterStatus(message))
            .await?;
    }
    Ok(())
}

fn bound_params(portal: &Portal<String>) -> PgWireResult<Vec<Param>> {
    let mut params = Vec::with_capacity(portal.parameters.len());
    for (i, raw) in portal.parameters.iter().enumerate() {
        let oid = portal
            .statement
            .parameter_types
            .get(i)
            .and_then(|t| t.as_ref())
            .map(|t| t.oid())
            .unwrap_or(0);
        let text = match raw {
            None => None,
            Some(bytes) if portal.parameter_format.is_binary(i) => {
                Some(binary_to_text(oid, bytes).map_err(user_error)?)
            }
            Some(bytes) => Some(String::from_utf8(bytes.to_vec()).map_err(|_| {
                user_error(WireError::new(
                    "22021",
                    "a text parameter is not valid UTF-8",
                ))
            })?),
        };
        params.push(Param { text, oid });
    }
    Ok(params)
}

/// Whether `sql` is `ROLLBACK [WORK | TRANSACTION] TO [SAVEPOINT] name`.
fn rolls_back_to(sql: &str) -> bool {
    let mut words = sql.split_whitespace().map(|w| w.trim_end_matches(';'));
    if !words
        .next()
        .is_some_and(|w| w.eq_ignore_ascii_case("ROLLBACK"))
    {
        return false;
    }
    let mut next = words.next();
    if next.is_some_and(|w| w.eq_ignore_ascii_case("WORK") || w.eq_ignore_ascii_case("TRANSACTION"))
    {
        next = words.next();
    }
    next.is_some_and(|w| w.eq_ignore_ascii_case("TO"))
}

/// `ROLLBACK TO SAVEPOINT` in a failed transaction: the transaction goes on, so its
/// ReadyForQuery says 'T', as PostgreSQL's does. pgwire takes the status before the
/// statement runs and only ever keeps a failed one failed, so it is set to 'T' here,
/// first; if the statement fails (no such savepoint), its error makes it 'E' again.
fn recovering<C: ClientInfo>(client: &mut C, sql: &str) {
    if client.transaction_status() == TransactionStatus::Error && rolls_back_to(sql) {
        client.set_transaction_status(TransactionStatus::Transaction);
    }
}

/// Whether `sql` returns no rows whatever the design: a transaction command, or an
/// INSERT/UPDATE/DELETE without RETURNING (conservatively: "returning" nowhere in its
/// text). Its portal's Describe is NoData without asking the engine: a prepared
/// statement's Bind/Describe/Execute then makes one engine call, not two (pgbench
/// -M prepared: 9 of a TPC-B transaction's 10 statements, each call a hop through
/// tokio's blocking pool and the GIL). An error in it is reported by the Execute.
fn returns_nothing(sql: &str) -> bool {
    let head: String = sql
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_alphabetic())
        .collect::<String>()
        .to_ascii_uppercase();
    match head.as_str() {
        "BEGIN" | "START" | "COMMIT" | "END" | "ROLLBACK" | "ABORT" | "SAVEPOINT" | "RELEASE" => {
            true
        }
        "INSERT" | "UPDATE" | "DELETE" => !sql.to_ascii_lowercase().contains("returning"),
        _ => false,
    }
}

fn given_oids(stmt: &StoredStatement<String>) -> Vec<Oid> {
    stmt.parameter_types
        .iter()
        .map(|t| t.as_ref().map(|t| t.oid()).unwrap_or(0))
        .collect()
}

#[async_trait]
impl SimpleQueryHandler for Handler {
    async fn on_query<C>(&self, client: &mut C, query: Query) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        recovering(client, &query.query);
        self._on_query(client, query).await
    }

    async fn do_query<C>(&self, client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let running = self.running(client).await?;
        let outcomes = run_cancellable(running, query.to_owned(), Vec::new()).await?;
        report_status(client, changed_status(&outcomes)).await?;
        Ok(outcomes
            .into_iter()
            .map(|o| response(o, &Format::UnifiedText))
            .collect())
    }
}

#[async_trait]
impl ExtendedQueryHandler for Handler {
    type Statement = String;
    type QueryParser = NoopQueryParser;

    fn query_parser(&self) -> Arc<Self::QueryParser> {
        self.parser.clone()
    }

    async fn do_query<C>(
        &self,
        client: &mut C,
        portal: &Portal<Self::Statement>,
        _max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let running = self.running(client).await?;
        let params = bound_params(portal)?;
        let sql = portal.statement.statement.clone();
        let mut outcomes = run_cancellable(running, sql, params).await?;
        report_status(client, changed_status(&outcomes)).await?;
        if outcomes.len() > 1 {
            return Err(user_error(WireError::new(
                "42601",
                "cannot insert multiple commands into a prepared statement",
            )));
        }
        Ok(match outcomes.pop() {
            Some(outcome) => response(outcome, &portal.result_column_format),
            None => Response::EmptyQuery,
        })
    }

    async fn on_execute<C>(&self, client: &mut C, message: Execute) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let name = message.name.as_deref().unwrap_or(DEFAULT_NAME);
        let sql = client
            .portal_store()
            .get_portal(name)
            .and_then(|entry| match entry {
                Entry::Value(portal) => Some(portal.statement.statement.clone()),
                _ => None,
            });
        if let Some(sql) = sql {
            recovering(client, &sql);
        }
        self._on_execute(client, message).await
    }

    /// A Describe of a portal pgwire does not know may name a SQL cursor
    /// (`DECLARE c CURSOR FOR ...`: psycopg's named cursors describe it so);
    /// the engine knows its columns.
    async fn on_describe<C>(&self, client: &mut C, message: Describe) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if message.target_type == TARGET_TYPE_BYTE_PORTAL {
            if let Some(cursor) = message.name.as_deref() {
                if client.portal_store().get_portal(cursor).is_none() {
                    let session = self.session(client).await?;
                    let sql = format!("FETCH 0 FROM \"{}\"", cursor.replace('"', "\"\""));
                    let found = blocking(move || session.describe(&sql, &[])).await?;
                    let fields = field_infos(&found.fields, &Format::UnifiedText);
                    send_describe_response(client, &DescribePortalResponse::new(fields)).await?;
                    return Ok(());
                }
            }
        }
        self._on_describe(client, message).await
    }

    async fn do_describe_statement<C>(
        &self,
        client: &mut C,
        target: &StoredStatement<Self::Statement>,
    ) -> PgWireResult<DescribeStatementResponse>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let session = self.session(client).await?;
        let (sql, oids) = (target.statement.clone(), given_oids(target));
        let found = blocking(move || session.describe(&sql, &oids)).await?;
        let params = found
            .params
            .iter()
            .map(|oid| Type::from_oid(*oid).unwrap_or(Type::UNKNOWN))
            .collect();
        // formats are chosen at Bind: a statement's description says text
        let fields = field_infos(&found.fields, &Format::UnifiedText);
        Ok(DescribeStatementResponse::new(params, fields))
    }

    async fn do_describe_portal<C>(
        &self,
        client: &mut C,
        target: &Portal<Self::Statement>,
    ) -> PgWireResult<DescribePortalResponse>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if returns_nothing(&target.statement.statement) {
            return Ok(DescribePortalResponse::new(Vec::new()));
        }
        let session = self.session(client).await?;
        let (sql, oids) = (
            target.statement.statement.clone(),
            given_oids(&target.statement),
        );
        let found = blocking(move || session.describe(&sql, &oids)).await?;
        Ok(DescribePortalResponse::new(field_infos(
            &found.fields,
            &target.result_column_format,
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::returns_nothing;

    #[test]
    fn commands_without_rows() {
        for sql in [
            "BEGIN;",
            "  end",
            "COMMIT",
            "rollback to savepoint a",
            "UPDATE pgbench_accounts SET abalance = abalance + $1 WHERE aid = $2;",
            "INSERT INTO h (a, b) VALUES ($1, CURRENT_TIMESTAMP);",
            "delete from t where k = $1",
        ] {
            assert!(returns_nothing(sql), "{sql}");
        }
    }

    #[test]
    fn statements_that_may_return_rows() {
        for sql in [
            "SELECT abalance FROM pgbench_accounts WHERE aid = $1;",
            "INSERT INTO t (a) VALUES ($1) RETURNING id",
            "update t set a = 1 returning *",
            "DELETE FROM t WHERE note = 'Returning'",
            "WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d",
            "WITH x AS (SELECT 1) UPDATE t SET a = 1",
            "SHOW TimeZone",
            "FETCH 1 FROM c",
            "VALUES (1)",
            "(SELECT 1)",
            "",
        ] {
            assert!(!returns_nothing(sql), "{sql}");
        }
    }
}
