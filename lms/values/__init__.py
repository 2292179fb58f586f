"""Plain values a user sets or reads, without TensorFlow: sizes and budgets, the tuning parameters,
the link, every option of `LMS(...)`, and the report types that cross into a program recording
them. The floor every other layer of `lms` stands on (with `lms.errors` and `lms._tf_private`)."""
