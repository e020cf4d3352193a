"""When to combine before the shuffle: decided per epoch from what the previous epoch recorded.

Combining (the partials of :meth:`fsstate.operators.base.Operator.combine`, computed under
Spark by Spark's own aggregate, or by the operator in Python) costs an aggregation of every raw
row and, under Spark, a second shuffle; it saves the stateful stage the rows it folds away. It
pays when keys repeat within a batch, and costs more than it saves when they barely do.
Measured by hand with the ``spark_matrix`` queries at 4 partitions: at 2 rows per key per
batch (a combine keeps half the rows) combining every epoch took 0.90 s per batch against
0.61 s without it (windowed count; Python combining was 6 to 9 % slower than none there), at 20
rows per key (a twentieth) combining pays. So a driver combines an epoch's rows only while
combining keeps at most :data:`KEEP_FRACTION_MAX` of them, as Spark's partial aggregation
stops when it does not reduce. ``rows`` and ``groups`` are the same whichever way the partials
were computed; ``input`` is at most ``groups`` after Spark's aggregate, at most ``groups``
times the input partitions after Python's.

What an epoch records (:class:`fsstate.store.record.CombineRecord`, the version meta
``combine``, :func:`batch_stats`; summed over a stage's partitions by
:meth:`~fsstate.store.record.CombineRecord.merge`):

==============  ===========================================================================
``rows``        raw input rows the epoch's input stands for (a combined row counts the raw
                rows it folds: the combined column :data:`ROWS`)
``input``       rows the stage received (``rows`` when not combined)
``groups``      distinct groups (keys, and panes of windows) among them
``combined``    1 if the input was combined
``skip_until``  combining is not tried again before this epoch (after one that did not pay)
==============  ===========================================================================

Invariants:

* The decision for epoch ``b`` (:func:`decide`) depends only on the committed versions
  ``b - 1`` of the stage's partitions, so every attempt of ``b`` decides the same: combined or
  not, an epoch gives the same state and output (up to floating-point rounding of sums, which
  then is the same in every attempt too).
* Without a record (epoch 0, state from before this record, a rescaled stage) the epoch
  combines, as before.
* A skip that follows a combine that did not pay lasts :data:`RETRY_EPOCHS` epochs, so a
  stage whose data repeat keys globally but not per input partition does not alternate.
"""

from __future__ import annotations

from fsstate.store.record import CombineRecord

ROWS = "_fsstate_rows"  # combined rows: the raw rows each folds (int64)
KEEP_FRACTION_MAX = 0.25  # combine while it keeps at most this fraction of the raw rows
RETRY_EPOCHS = 10  # epochs without combining after one whose combine did not pay


def batch_stats(rows: int, received: int, groups: int, combined: bool) -> CombineRecord:
    """An epoch's record of one partition (``skip_until`` is added by the runner)."""
    return CombineRecord(rows, received, groups, combined)


def decide(previous: CombineRecord | None, epoch: int) -> tuple[bool, int]:
    """Whether epoch ``epoch`` combines, and the ``skip_until`` its epochs record.

    Args:
        previous: the stage's merged record of epoch ``epoch - 1`` (None: none).
        epoch: the epoch being planned.
    """
    if previous is None:
        return True, 0
    skip_until = previous.skip_until
    if epoch < skip_until:
        return False, skip_until
    rows = previous.rows
    if rows <= 0:  # no input: nothing learnt, keep what the last epoch did
        return previous.combined, skip_until
    if previous.combined:
        kept = previous.input / rows
        if kept <= KEEP_FRACTION_MAX:
            return True, 0
        return False, epoch + RETRY_EPOCHS
    # not combined: even all of a group's rows in one input partition would keep this much
    best = previous.groups / rows
    return best <= KEEP_FRACTION_MAX, 0
