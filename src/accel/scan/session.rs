//! A window's session: the runner's base session with the window's shared sources swapped for
//! in-memory slices, and the window's configuration (its share of the cores, its batch size).
//!
//! Building a DataFusion `SessionContext` registers every built-in function anew; a window that
//! binds prepared plans needs none of that, only its tables and a session state to plan the
//! physical execution in. So a window session is kept as the parts — base session, slices,
//! configuration — and a full context is built only for a window that plans on its own.
//!
//! Invariant: whichever way it is used, a window sees the same tables: the slices under the
//! shared sources' names (in the default schema), everything else as in the base session.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::RecordBatch;
use datafusion::catalog::TableProvider;
use datafusion::common::TableReference;
use datafusion::datasource::MemTable;
use datafusion::execution::SessionState;
use datafusion::prelude::{SessionConfig, SessionContext};

use crate::error::Result;

/// Tables by name in the default schema.
type Tables = HashMap<String, Arc<dyn TableProvider>>;

/// A window's slices by source name: the partitions of its in-memory table.
pub type Parts = HashMap<String, Vec<Vec<RecordBatch>>>;

/// The tables and configuration one window runs with.
pub struct WindowSession {
    base: SessionContext,
    /// `None`: the base session as it is.
    window: Option<(SessionConfig, Tables, Parts)>,
    /// Aliases read from a shared slice, for logs.
    pub shared: Vec<String>,
}

impl WindowSession {
    /// The base session unchanged.
    pub fn base(base: &SessionContext) -> WindowSession {
        WindowSession {
            base: base.clone(),
            window: None,
            shared: Vec::new(),
        }
    }

    /// `base` with in-memory tables of `parts` in place of the sources of those names, run
    /// with `config`.
    pub fn with_slices(
        base: &SessionContext,
        config: SessionConfig,
        parts: Parts,
    ) -> Result<WindowSession> {
        let mut tables: Tables = HashMap::new();
        for (alias, p) in &parts {
            let schema = p[0][0].schema();
            tables.insert(
                alias.clone(),
                Arc::new(MemTable::try_new(schema, p.clone())?),
            );
        }
        let mut shared: Vec<String> = parts.keys().cloned().collect();
        shared.sort();
        Ok(WindowSession {
            base: base.clone(),
            window: Some((config, tables, parts)),
            shared,
        })
    }

    /// The name `name` has in the default schema, if it is in it.
    fn local<'a>(&self, name: &'a TableReference) -> Option<&'a str> {
        let (config, _, _) = self.window.as_ref()?;
        let catalog = &config.options().catalog;
        let table = match name {
            TableReference::Bare { table } => Some(table),
            TableReference::Partial { schema, table } => {
                (**schema == catalog.default_schema).then_some(table)
            }
            TableReference::Full {
                catalog: c,
                schema,
                table,
            } => (**c == catalog.default_catalog && **schema == catalog.default_schema)
                .then_some(table),
        };
        table.map(|t| t.as_ref())
    }

    /// The table `name` refers to in this window.
    pub async fn provider(&self, name: &TableReference) -> Result<Arc<dyn TableProvider>> {
        if let (Some(t), Some((_, tables, _))) = (self.local(name), &self.window)
            && let Some(p) = tables.get(t)
        {
            return Ok(p.clone());
        }
        Ok(self.base.table_provider(name.clone()).await?)
    }

    /// The partitions of the slice `name` refers to, if it refers to one.
    pub fn slice(&self, name: &TableReference) -> Option<Vec<Vec<RecordBatch>>> {
        let (_, _, parts) = self.window.as_ref()?;
        parts.get(self.local(name)?).cloned()
    }

    /// A session state to plan this window's physical execution in (the base session's
    /// functions and catalog, this window's configuration). Its catalog still names the
    /// sources themselves: plans get their tables from [`Self::provider`].
    pub fn state(&self) -> SessionState {
        let mut state = self.base.state();
        if let Some((config, _, _)) = &self.window {
            *state.config_mut() = config.clone();
        }
        state
    }

    /// A full session for this window, its tables registered (for planning from SQL).
    pub async fn context(&self) -> Result<SessionContext> {
        let Some((config, slices, _)) = &self.window else {
            return Ok(self.base.clone());
        };
        let ctx = SessionContext::new_with_config_rt(config.clone(), self.base.runtime_env());
        for alias in super::base_tables(&self.base) {
            let provider = match slices.get(&alias) {
                Some(p) => p.clone(),
                None => self.base.table_provider(alias.as_str()).await?,
            };
            ctx.register_table(alias.as_str(), provider)?;
        }
        Ok(ctx)
    }
}
