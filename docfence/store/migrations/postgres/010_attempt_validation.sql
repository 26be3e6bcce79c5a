-- 010_attempt_validation: the validation report of an attempt that failed validation, kept on its
-- attempt row (lockstep with sqlite/010_attempt_validation.sql), so the job view, `docfence inspect` and the
-- console can say which check failed on which page and what differed. JSON text, at most 16 KiB (the
-- worker bounds it); check names, page numbers and PDF names only, never document text. NULL for every
-- other attempt. Like the rest of the attempt row it is evidence: written once, never overwritten.
ALTER TABLE attempts ADD COLUMN validation TEXT;
