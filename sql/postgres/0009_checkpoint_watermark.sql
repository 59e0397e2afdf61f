-- The projection watermark a checkpoint's total was read at: every event with seq up to it was
-- folded into the intervals the cycle summed. The next cycle refolds, as of this seq, only the
-- resources that received events dated before its aged-out boundary since, to date their change
-- exactly (docs/ledger.md, "The aged-out split"). NULL: posted before this column existed.
ALTER TABLE usage_checkpoints ADD COLUMN watermark BIGINT;
