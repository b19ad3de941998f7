-- Schema 7: the directories of remote (Slurm) attempts whose results are saved, written in
-- the same transaction as those results, until the files are removed. The removal runs
-- after the commit, off the baton's task; a conductor killed in between left the attempt's
-- files behind for good. A row here is a removal still owed: the next conductor carries it
-- out at its start and deletes the row. Every name holds a millisecond clock, so a listed
-- directory is never an attempt that runs.
CREATE TABLE remote_leftovers (
    dir TEXT PRIMARY KEY NOT NULL
) WITHOUT ROWID;
