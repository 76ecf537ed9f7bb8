//! Example pipelines.
