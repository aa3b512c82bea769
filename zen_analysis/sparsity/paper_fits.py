"""The fitted laws behind the paper workloads (:mod:`~zen_analysis.sparsity.paper_workloads`), stored as data.

Each was fitted once by :mod:`~zen_analysis.sparsity.workload_fit` on a capture or a text, named in its docstring with
the command that made the capture; a refit gives the same numbers on the same corpus (the stdlib corpus differs
between Python versions). The paper's own results fit none of them.
"""

from __future__ import annotations

from zen_analysis.sparsity.workload_fit import SetStatistics, TopkFit, TopkPart, ZipfFit

LSTM_WORDS_FIT = ZipfFit(
    exponent=1.1930046504409986,
    draws=303.00616798351547,
    num_rows=69071,
    tokens=512,
    fitted_on=SetStatistics(
        num_rows=69071, workers=32, steps=4, rows=138.4453125, overlap=0.26373989446856566,
        gamma=15.769083823807847, share0=0.8701968158641455,
    ),
)  # fmt: skip
"""The word LSTM's id law, fitted on ``lstm-words`` (Python 3.11 stdlib corpus: 69,071 words; 32 workers of 4 x 128
tokens) by ``zen-analysis train lstm-words --run-id fit-lstm-words --set capture.topk_scope=none --set
capture.every=1 --set train.num_steps=4`` and then ``workload_fit.fit_capture("fit-lstm-words")``. Which rows a batch
touches depends on the data only, so 4 captured steps of 32 workers suffice."""

IWSLT14_VOCAB = (32_011, 22_824)
"""IWSLT'14 De-En word vocabularies (German source, English target, 4 specials each included): pcyin/pytorch_nmt's
``data/iwslt.vocab.bin`` (commit bf28dae), built by its ``vocab.py`` (singletons dropped) on Ranzato et al.'s
(ICLR'16, MIXER) word-level preprocessing of the 153k training pairs."""
IWSLT14_FIT = {
    "src": ZipfFit(
        exponent=1.2873421455221252, draws=1942.3369698972006, num_rows=32011, tokens=1157,
        fitted_on=SetStatistics(
            num_rows=32011, workers=16, steps=20, rows=420.40625, overlap=0.3458067594588249,
            gamma=7.077500528318285, share0=0.8185994563476967,
        ),
    ),
    "tgt": ZipfFit(
        exponent=1.2924510528845712, draws=2341.544636199618, num_rows=22824, tokens=1342,
        fitted_on=SetStatistics(
            num_rows=22824, workers=16, steps=20, rows=464.721875, overlap=0.35881677114555177,
            gamma=6.775921791680682, share0=0.8045205199307549,
        ),
    ),
}  # fmt: skip
"""Each NMT side's id law: :func:`~zen_analysis.sparsity.workload_fit.fit_zipf` on 20 steps x 16 workers of 64
random sentence pairs of IWSLT'14 De-En's valid and test text in the same repository and preprocessing (13,719
pairs; 18.1 German words per sentence, 21.0 English tokens with <s> and </s>), words mapped to the vocabulary's ids.
The text is not shipped here; the fitted numbers are."""

OPT_TOPK_FIT = TopkFit(
    parts=(
        TopkPart(
            kind="layers",
            share=0.27197390461077314,
            rates=(
                0.07309, 0.06649, 0.06792, 0.05956, 0.05968, 0.06428, 0.06488, 0.07509, 0.06589, 0.06427, 0.07049,
                0.06029, 0.06111, 0.06697, 0.05619, 0.05479, 0.05968, 0.06058, 0.06496, 0.07536, 0.06521, 0.06501,
                0.06788, 0.06547, 0.07066, 0.06663, 0.06118, 0.06521, 0.05923, 0.06248, 0.0558, 0.06538, 0.04236,
                0.03363, 0.04407, 0.03367, 0.03321, 0.02921, 0.03412, 0.02934, 0.03447, 0.03768, 0.03066, 0.02446,
                0.02783, 0.02447, 0.03105, 0.04181, 0.03394, 0.02606, 0.03238, 0.03497, 0.02921, 0.03816, 0.03075,
                0.0293, 0.0336, 0.02868, 0.03096, 0.0376, 0.04229, 0.03112, 0.03183, 0.03433, 0.07333, 0.07692,
                0.07125, 0.06578, 0.06899, 0.05956, 0.07163, 0.06237, 0.07108, 0.06632, 0.06734, 0.06501, 0.06902,
                0.06583, 0.06563, 0.06626, 0.07186, 0.07247, 0.06447, 0.0624, 0.06746, 0.06914, 0.06937, 0.06554,
                0.06753, 0.0672, 0.0731, 0.06766, 0.06747, 0.06835, 0.0714, 0.07586, 0.03013, 0.03111, 0.02894,
                0.02587, 0.03131, 0.03846, 0.02887, 0.03331, 0.04041, 0.03032, 0.03748, 0.03008, 0.02865, 0.04441,
                0.03478, 0.03262, 0.03767, 0.03043, 0.04171, 0.03778, 0.0395, 0.03506, 0.02915, 0.03527, 0.03807,
                0.03558, 0.02533, 0.02812, 0.04041, 0.02661, 0.03715, 0.03444,
            ),
            rho=0.18510728756110834,
            fitted_on=SetStatistics(
                num_rows=1579520, workers=16, steps=2, rows=78798.03125,
                overlap=0.1073096120353153, gamma=8.55928110513548, share0=0.16145787271810805,
            ),
        ),
        TopkPart(
            kind="embedding",
            share=0.7280260953892268,
            rates=(
                0.7759, 0.6475, 0.1511, 0.08322, 0.2452, 0.1885, 0.315, 0.2512, 0.2464, 0.1799, 0.1628, 0.1511,
                0.1376, 0.1306, 0.1158, 0.1089, 0.09206, 0.08824, 0.08435, 0.07869, 0.06957, 0.07124, 0.06369,
                0.06079, 0.03304, 0.04211, 0.04057, 0.03868, 0.039, 0.03101, 0.03395, 0.02921, 0.03, 0.03083,
                0.02668, 0.02693, 0.02083, 0.02261, 0.02499, 0.02107, 0.02084, 0.01969, 0.02082, 0.01608, 0.01789,
                0.01765, 0.01771, 0.01469, 0.01392, 0.01296, 0.01144, 0.01454, 0.01725, 0.01752, 0.01323, 0.01401,
                0.01401, 0.01144, 0.01189, 0.009338, 0.007094, 0.01241, 0.01131, 0.01078, 0.0126, 0.01276, 0.01058,
                0.01243, 0.01051, 0.01029, 0.01104, 0.008569, 0.007305, 0.005418, 0.009759, 0.005618, 0.005203,
                0.005774, 0.00847, 0.006639, 0.008749, 0.005761, 0.006819, 0.0079, 0.007472, 0.006063, 0.008012,
                0.006948, 0.007955, 0.006053, 0.008097, 0.006136, 0.003701, 0.004759, 0.004582, 0.005137, 0.006456,
                0.006167, 0.007336, 0.005774, 0.005533, 0.006478, 0.004799, 0.005319, 0.003055, 0.004682, 0.003934,
                0.004311, 0.003638, 0.00567, 0.004552, 0.006638, 0.004343, 0.003898, 0.004133, 0.006659, 0.005673,
                0.008111, 0.006649, 0.004215, 0.003158, 0.005033, 0.00185, 0.002902, 0.002296, 0.005803, 0.002269,
                0.003602,
            ),
            rho=0.7723350698240716,
            fitted_on=SetStatistics(
                num_rows=4228096, workers=16, steps=2, rows=189653.125,
                overlap=0.6153393279441106, gamma=4.672227256998797, share0=0.6776593781410141,
            ),
        ),
    ),
)  # fmt: skip
"""The LLMs' top-k laws, one per kind of bucket, fitted on ``opt`` (8 DGC buckets of 1 MB cap: 6 of the decoder
layers, 1 of the LM head, 1 of the embeddings; 16 workers, steps 10 and 20) by ``zen-analysis train opt --run-id
fit-opt --set train.num_steps=30 --set train.workers_per_rank=4`` (``make reproduce``'s trim) and then
``workload_fit.fit_topk_capture("fit-opt")``. ``share`` is the capture's; the generator sets the paper model's."""
