"""What a resumed study says of a folder another version of dpmed's image decoding read (`dpmed.data.version`)."""

from __future__ import annotations

from dpmed.data.version import CHANGES, DECODING_VERSION, UNRECORDED, decoded_since


def test_a_folder_of_this_decoder_has_no_change_and_an_older_one_every_change_since_in_order():
    assert decoded_since(DECODING_VERSION) == []
    assert decoded_since(DECODING_VERSION - 1) == [CHANGES[DECODING_VERSION]]
    told = decoded_since(UNRECORDED)
    assert told[:-1] == [CHANGES[v] for v in range(UNRECORDED + 1, DECODING_VERSION + 1)]
    assert "earlier changes" in told[-1]       # the decoders before the version was recorded changed too


def test_a_newer_decoder_is_named_as_such_with_both_versions():
    (told,) = decoded_since(DECODING_VERSION + 1)
    assert "newer dpmed" in told and f"{DECODING_VERSION + 1}" in told and f"{DECODING_VERSION}" in told
