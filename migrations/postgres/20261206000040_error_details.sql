-- A failure's details as its worker over HTTP reported them (a JSON
-- object), shown in the job's error; NULL for every other failure.
ALTER TABLE jobs ADD COLUMN error_details jsonb;
