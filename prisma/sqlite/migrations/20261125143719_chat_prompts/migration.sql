-- CreateTable
CREATE TABLE "ChatPrompt" (
    "platform" TEXT NOT NULL,
    "account" TEXT NOT NULL,
    "chatId" TEXT NOT NULL,
    "text" TEXT NOT NULL,
    "updatedBy" TEXT,
    "updatedAt" DATETIME NOT NULL,

    PRIMARY KEY ("platform", "account", "chatId")
);
