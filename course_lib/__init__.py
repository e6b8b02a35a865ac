"""Reference implementations for the Transformers course.

Modules, one concept each: ``attention``, ``multihead``, ``layers``,
``complexity``, ``positional``, ``vit``, ``linear_attention``,
``seq2seq`` (the encoder-decoder) and ``number_words`` (its task),
``sequence_model``, ``language_model``, ``generation``, ``induction``;
plus the chapters' plotting helpers and the autograder's checks. Tokens
are rows: ``X`` has shape ``(..., N, D)``; see each module's docstring.
"""

__version__ = "0.1.0"
