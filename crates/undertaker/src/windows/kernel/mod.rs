//! Windows kernel access: every Win32 call, in one audited file.
pub mod sys;
