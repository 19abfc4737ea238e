"""The text wing: words (tokenizer, case, batches), records, and the text privatizer that runs a mechanism over them."""
