"""Data-prep stages: the contract (`base.py`) and the stages a pipeline lists.

    plan (driver)        plan.plan_work_items       list files, sizes, row groups; cut into work items
    read                 read.ReadStage             a work item's documents, local or fsspec URL
    records -> chats     chat_records.RecordsToChatStage  post-training records in a chat template (SFT)
    filter + split       filter_split.FilterSplitStage  per document, from its text and its id
    dedup (two passes)   dedup.SignatureStage -> dedup.resolve_signatures (driver) -> dedup.DecisionStage
    SFT chats (two)      conversations.ConversationSignatureStage -> resolve_conversations (driver) -> DecisionStage
    tokenize-and-write   write.TokenizeWriteStage   one shard per split, any format of `formats/`
    finalize (driver)    finalize.finalize          receipts -> statistics, data_paths.json, blend.json

The post-training normalization is one more list on the same runner (`post_training/normalize_run.py`):
read raw records -> normalize (the family readers, removals counted) -> write Parquet, per work item.

`runner.py` runs the worker stages over the work items on an executor, with receipts (`attempt.py`: one
work item's receipt protocol, which every executor keeps; `xenna.py`: the opt-in cosmos-xenna one). A pipeline
(`pipeline.py`) is a list of these; to customise one, edit the list (docs/data-prep.md).
"""

from nemotron.data_prep.stages.base import ItemContext, Resources, Stage, WorkItem
from nemotron.data_prep.stages.chat_records import RecordsToChatStage
from nemotron.data_prep.stages.filter_split import FilterSplitStage
from nemotron.data_prep.stages.plan import plan_work_items
from nemotron.data_prep.stages.read import ReadStage
from nemotron.data_prep.stages.runner import StagePlan, plan_stages, run_pending, run_stages
from nemotron.data_prep.stages.write import TokenizeWriteStage

__all__ = ["FilterSplitStage", "ItemContext", "ReadStage", "RecordsToChatStage", "Resources", "Stage", "StagePlan",
           "TokenizeWriteStage", "WorkItem", "plan_stages", "plan_work_items", "run_pending", "run_stages"]
