"""Side-by-side measurements of Cloze against the Hugging Face reference path."""
