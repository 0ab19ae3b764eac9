"""The schema revisions of the audit store, oldest first."""
