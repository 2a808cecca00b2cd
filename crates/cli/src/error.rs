//! One error type for the binary, carrying the documented exit code, and the single place
//! where every library error kind is mapped onto an exit code.

use warden_core::model::IdError;
use warden_core::ops::Refusal;
use warden_store::config::ConfigError;
use warden_store::files::FileError;
use warden_store::workspace::WorkspaceError;
use warden_store::{EngineError, OpenError, StoreError};

/// An error a person sees: one line, then optional detail lines (a guard's output tail).
#[derive(Debug)]
pub struct CliError {
    /// The exit code (DESIGN 4).
    pub code: i32,
    /// The one-line message.
    pub message: String,
    /// Extra lines after the message.
    pub detail: Option<String>,
}

impl CliError {
    pub fn new(code: i32, message: impl Into<String>) -> CliError {
        CliError {
            code,
            message: message.into(),
            detail: None,
        }
    }
    /// Usage or configuration (exit 2).
    pub fn usage(message: impl Into<String>) -> CliError {
        CliError::new(2, message)
    }
    /// Refused (exit 1).
    pub fn refused(message: impl Into<String>) -> CliError {
        CliError::new(1, message)
    }
    /// Not found (exit 3).
    pub fn not_found(message: impl Into<String>) -> CliError {
        CliError::new(3, message)
    }
    /// Storage or internal (exit 5).
    pub fn internal(message: impl Into<String>) -> CliError {
        CliError::new(5, message)
    }
    pub fn with_detail(mut self, detail: impl Into<String>) -> CliError {
        self.detail = Some(detail.into());
        self
    }

    /// Prints the error to stderr and returns the exit code.
    pub fn report(&self) -> i32 {
        let prefix = if self.message.starts_with("refused:") || self.message.starts_with("error:") {
            ""
        } else {
            "error: "
        };
        eprintln!("{prefix}{}", self.message);
        if let Some(d) = &self.detail {
            eprintln!("{}", d.trim_end());
        }
        self.code
    }
}

impl From<Refusal> for CliError {
    fn from(e: Refusal) -> Self {
        CliError::new(e.exit_code(), e.to_string())
    }
}

impl From<StoreError> for CliError {
    fn from(e: StoreError) -> Self {
        CliError::new(e.exit_code(), e.to_string())
    }
}

impl From<OpenError> for CliError {
    fn from(e: OpenError) -> Self {
        CliError::new(e.exit_code(), e.to_string())
    }
}

impl From<WorkspaceError> for CliError {
    fn from(e: WorkspaceError) -> Self {
        CliError::new(e.exit_code(), e.to_string())
    }
}

impl From<ConfigError> for CliError {
    fn from(e: ConfigError) -> Self {
        CliError::usage(e.to_string())
    }
}

impl From<FileError> for CliError {
    fn from(e: FileError) -> Self {
        let code = e.exit_code();
        let msg = e.to_string();
        CliError::new(
            code,
            if code == 1 {
                format!("refused: {msg}")
            } else {
                msg
            },
        )
    }
}

impl From<IdError> for CliError {
    fn from(e: IdError) -> Self {
        CliError::usage(e.to_string())
    }
}

impl From<EngineError> for CliError {
    fn from(e: EngineError) -> Self {
        CliError::new(e.exit_code(), e.message())
    }
}
