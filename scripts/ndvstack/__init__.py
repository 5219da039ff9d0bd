"""ndvstack: keep a stack of patches against pytorch/pytorch as data, and move it in
and out of git checkouts, overlays and wheels."""
