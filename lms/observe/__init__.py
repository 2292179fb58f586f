"""What TensorFlow ran, read back: which LMS ops survived Grappler and where they ran
(`placement`), Grappler's GPU passes replayed (`grappler_replay`), and the copies matched to
swaps (`copy_match`, `copy_events`)."""
