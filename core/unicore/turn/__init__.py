"""core/unicore/turn"""
