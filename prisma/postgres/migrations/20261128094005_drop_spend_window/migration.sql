/*
  Warnings:

  - You are about to drop the `SpendWindow` table. If the table is not empty, all the data it contains will be lost.

*/
-- DropTable
DROP TABLE "SpendWindow";
