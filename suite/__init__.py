"""The LMS benchmark suite: specs of trials, running them on hosts, recording and reporting what
they measured. It uses only lms's public names; its folders are its layers
(docs/architecture.md)."""
